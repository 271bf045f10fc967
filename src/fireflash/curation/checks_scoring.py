"""Gates 6-9: the grader scores what it should: do-nothing and placeholder attempts score 0 (6), alternative
solutions pass (7), malformed workspaces never crash it (8), and rescoring gives the same result (9)."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from pathlib import PurePosixPath
from typing import Any

from fireflash.curation.context import GateContext, closing, fmt
from fireflash.curation.fuzz import MUTATIONS, apply_mutation
from fireflash.grading.graders import GRADERS, NOT_RUN, score_swe, score_tests, task_checks
from fireflash.grading.reports import ReportError, match_declared, parse_junit
from fireflash.grading.verifier import run_verifier
from fireflash.protocols import Sandbox, Task

PLACEHOLDER = b"TODO\n"
CRASH_REASONS = {"grader_error", "no_report", "bad_report", "timeout", NOT_RUN}


async def _verifier_ran(s: GateContext) -> str | None:
    """Gates 6, 8, 9 judge scores; those of a verifier that never ran are meaningless (all 0): their verdict."""
    why = await s.verifier_not_run()
    return None if why is None else f"verifier did not run: {why}"


def _outcome(task: Task, output: Any) -> dict[str, bool]:
    """Check id → passed in one verifier run, in the id space ``score_tests`` uses ({} without a report)."""
    try:
        checks = parse_junit(output.reports["junit.xml"])
    except (KeyError, ReportError):
        return {}
    expected = task_checks(task)
    return match_declared(expected, checks) if expected else {c.id: c.passed for c in checks}


async def _probes(s: GateContext) -> AsyncIterator[tuple[str, Sandbox]]:
    """Gate 6's probes: doing nothing, and every expected file empty or a placeholder; caller closes each."""
    parent = await s.prepare()
    yield "do-nothing", await parent.fork()
    expected = await s.expected_files()
    for label, content in (("empty", b""), ("placeholder", PLACEHOLDER)):
        boiler = await parent.fork()
        for path in expected:
            await boiler.exec(
                f"rm -rf {shlex.quote(path)}; mkdir -p $(dirname {shlex.quote(path)})", timeout_sec=30
            )
            await boiler.write_file(path, content)
        yield f"{label} files ({len(expected)})", boiler


async def gate_null_zero(s: GateContext) -> tuple[bool, str]:
    """Probes score 0. For the tests grader the checks a probe passes are free (``partial_credit``): they
    are recorded in ``s.free_checks`` (the gate report) and the probes are scored without them; only a
    probe passing every check (or a reward file giving it credit) fails the gate."""
    not_run = await _verifier_ran(s)
    if not_run:
        return False, not_run
    calibrate = s.task.grader.kind == "tests"
    runs: list[tuple[str, Any]] = []
    async for label, probe in _probes(s):
        async with closing(probe):
            runs.append((label, await run_verifier(s.task, probe) if calibrate else await s.grade(probe)))
    if calibrate:
        free = sorted({c for _, out in runs for c, ok in _outcome(s.task, out).items() if ok})
        s.free_checks = free
        runs = [(label, score_tests(out, task_checks(s.task), free)) for label, out in runs]
    details = [f"{label} {fmt(score)}" for label, score in runs]
    ok = all(score.reward == 0.0 for _, score in runs)
    if calibrate and s.free_checks:
        details.append(
            f"calibrated: {len(s.free_checks)} free check(s) that probes pass earn no partial credit: "
            + ", ".join(s.free_checks)
        )
    return ok, "; ".join(details)


async def gate_not_fragile(s: GateContext) -> tuple[bool | None, str]:
    """Gate 7: every alternative solution (solution/alt_*.sh) solves the task too; skipped without one."""
    alts = sorted((s.task.path / "solution").glob("alt_*.sh")) if s.task.path else []
    if not alts:
        return None, "no alternative solutions shipped (solution/alt_*.sh): nothing to replay"
    failures, details = [], []
    for alt in alts:
        async with closing(await s.replay(alt)) as attempt:
            score = await s.grade(attempt)
        details.append(f"{alt.name}: {fmt(score)}")
        if not score.solved:
            failures.append(alt.name)
    return not failures, "; ".join(details)


async def _mutated(s: GateContext, base: Sandbox, mutation: str, seed: int) -> Sandbox:
    fork = await base.fork()
    targets = await s.expected_files() or [str(PurePosixPath(s.task.environment.workdir) / "output.txt")]
    await apply_mutation(fork, mutation, targets, seed)
    return fork


async def gate_malformed_ok(s: GateContext) -> tuple[bool, str]:
    """Gate 8: malformed workspaces (``curation.fuzz`` mutations) score without a grader crash."""
    not_run = await _verifier_ran(s)
    if not_run:
        return False, not_run
    base = s.solved or await s.prepare()
    problems, seen = [], []
    for i in range(s.cfg.fuzz_cases):
        mutation = MUTATIONS[i % len(MUTATIONS)]
        try:
            async with closing(await _mutated(s, base, mutation, seed=i)) as fork:
                score = await s.grade(fork)
        except Exception as e:  # noqa: BLE001 - the grader crashing is exactly what this gate detects
            problems.append(f"{mutation}: grader raised {type(e).__name__}: {e}"[:300])
            continue
        seen.append(f"{mutation}={score.reward:.2f}")
        if score.reason in CRASH_REASONS:
            problems.append(f"{mutation}: {fmt(score)} {score.log[-200:]!r}")
    if problems:
        return False, "; ".join(problems[:4])
    return True, f"{len(seen)} malformed workspaces scored: " + " ".join(seen)


def _checks_signature(task: Task, output: Any) -> tuple:
    """(score fields, per-check outcomes) of one verifier run, for exact comparison."""
    score = (
        score_swe(output, task.grader.fail_to_pass, task.grader.pass_to_pass)
        if task.grader.kind == "swe"
        else score_tests(output, task.metadata.get("expected_checks"))
    )
    try:
        checks = (
            sorted((c.id, c.passed) for c in parse_junit(output.reports["junit.xml"]))
            if "junit.xml" in output.reports
            else []
        )
    except ReportError:
        checks = [("<bad report>", False)]
    return (score.reward, score.solved, score.checks_passed, score.checks_total, score.reason, tuple(checks))


async def gate_deterministic(s: GateContext) -> tuple[bool, str]:
    """Gate 9: the same workspace scored repeatedly gives the same result."""
    not_run = await _verifier_ran(s)
    if not_run:
        return False, not_run
    states: list[tuple[str, Sandbox, bool]] = []
    if s.solved is not None:
        states.append(("reference", s.solved, False))
        states.append(("junk", await _mutated(s, s.solved, "binary_junk", seed=7), True))
    else:
        states.append(("do-nothing", await (await s.prepare()).fork(), True))
    details = []
    try:
        for label, sandbox, _ in states:
            if s.task.grader.kind in GRADERS:
                runs = [
                    _checks_signature(s.task, await run_verifier(s.task, sandbox))
                    for _ in range(s.cfg.determinism_repeats)
                ]
            else:
                runs = [
                    (await s.grade(sandbox)).model_dump(exclude={"log", "duration_sec"})
                    for _ in range(s.cfg.determinism_repeats)
                ]
                runs = [tuple(sorted(r.items())) for r in runs]
            if any(r != runs[0] for r in runs[1:]):
                differing = {str(r[:4]) for r in runs}
                return (
                    False,
                    f"{label} state scored {len(runs)} times gave different results: {', '.join(sorted(differing))}",
                )
            details.append(f"{label}: {len(runs)}x identical")
    finally:
        for _, sandbox, owned in states:
            if owned:
                await sandbox.close()
    return True, "; ".join(details)
