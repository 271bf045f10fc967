"""The nine gate checks: each takes a ``GateContext`` and returns (passed, detail) (RECIPE.md §3);
passed is None when the gate had nothing to check (reported as skipped, not as passed).

Gate 1 leaves the reference-solved attempt in the context; gates 5-9 read it. See ``gates`` for what
each gate means and ``validate_task`` for how they run.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import PurePosixPath
from typing import Any

from fireflash.curation.context import GateContext, closing, fmt, not_run_reason
from fireflash.curation.fuzz import MUTATIONS, apply_mutation
from fireflash.curation.replay import SHELL_OPTIONS
from fireflash.curation.requirements import task_stated
from fireflash.grading.graders import GRADERS, NOT_RUN, score_swe, score_tests, task_checks
from fireflash.grading.reports import ReportError, match_declared, parse_junit
from fireflash.grading.verifier import grading_fork, run_verifier
from fireflash.protocols import Sandbox, Task
from fireflash.tasks.git_strip import CHECK_GIT, KEEP_FIELD, PREMISE_FIELD, answer_in_git, git_findings

PLACEHOLDER = b"TODO\n"
CRASH_REASONS = {"grader_error", "no_report", "bad_report", "timeout", NOT_RUN}
# bash and coreutils only: an image need not have python3 in the agent's phase
NETWORK_PROBE = (
    "if timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>/dev/null; then echo -n ONLINE; else echo -n OFFLINE; fi; "
    "echo \" interfaces: $(cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' ' | tr '\\n' ' ')\""
)
# what a download prints when it finds no network: curl, wget, apt, pip/urllib/requests, git, uv
NETWORK_FAILURES = re.compile(
    r"(Could not resolve host: \S+|Temporary failure resolving '[^']+'|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|Failed to establish a new connection|"
    r"unable to resolve host address '[^']+'|Failed to fetch \S+|network (?:was|is) disabled|"
    r"Python downloads are set to 'never')"
)
# the uv installer's download, which staging replaces: its failure is expected, not a missing need
EXPECTED_OFFLINE = re.compile(r"Could not resolve host: astral\.sh")


async def _gate_reference(s: GateContext) -> tuple[bool, str]:
    if s.task.solution_path is None or not s.task.solution_path.is_file():
        return False, "no reference solution (solution/solve.sh)"
    score = await s.run_reference()
    why = not_run_reason(score)
    if why is not None:
        return False, f"verifier did not run: {why}\n{score.log[-1000:]}"
    ok = score.solved and score.reward == 1.0
    return ok, fmt(score) + ("" if ok else f"\n{score.log[-1500:]}")


async def _verifier_ran(s: GateContext) -> str | None:
    """Gates 6, 8, 9 judge scores; those of a verifier that never ran are meaningless (all 0): their verdict."""
    why = await s.verifier_not_run()
    return None if why is None else f"verifier did not run: {why}"


async def _gate_stated(s: GateContext) -> tuple[bool, str]:
    stated = task_stated(s.task)
    notes = ""
    if stated.notes:  # inputs, computed values, values to find: not owed to the agent, shown for review
        shown = "; ".join(f"{r.kind} {r.value!r} ({r.where}): {why}" for r, why in stated.notes[:8])
        more = f"; ... and {len(stated.notes) - 8} more" if len(stated.notes) > 8 else ""
        notes = f"\nnotes, not requirements ({len(stated.notes)}): {shown}{more}"
    if not stated.missing:
        return True, "every path, name and format the tests require is stated" + notes
    shown = "; ".join(f"{r.kind} {r.value!r} ({r.where})" for r in stated.missing[:8])
    return (
        False,
        f"{len(stated.missing)} requirement(s) checked by the tests but not stated in instruction.md: {shown}{notes}",
    )


async def _gate_offline(s: GateContext) -> tuple[bool, str]:
    """Network by phase (issue 26): the agent phase (the sandbox the reference is replayed in, gate 1) and the
    verifier phase (the grading fork) have no network, and both worked offline: the reference solved the task
    and the verifier produced its report. A task's ``allow_internet = true`` is recorded, not a failure; what
    its test.sh installs at test time is staged at build time, and what could not be is named here."""
    task, seen, problems = s.task, [], []
    if task.environment.allow_internet:
        seen.append("task declares allow_internet = true: recorded; agents run offline unless sandbox.allow_internet, "
                    "verifiers always")
    score = s.reference_score
    if score is None and task.solution_path is not None and task.solution_path.is_file():
        score = await s.run_reference()
    parent = await s.prepare()
    async with closing(await parent.fork()) as probe:
        agent = (await probe.exec(NETWORK_PROBE, timeout_sec=20)).preview.strip()
    async with closing(await grading_fork(task, s.solved or parent)) as probe:
        verifier = (await probe.exec(NETWORK_PROBE, timeout_sec=20)).preview.strip()
    for phase, probed in (("agent", agent), ("verifier", verifier)):
        if not probed.startswith("OFFLINE"):
            problems.append(f"{phase} phase reached the network: {probed[:200]}")
    staging = (task.metadata.get("image") or {}).get("verifier") or {}
    verifier_failures = sorted(set(NETWORK_FAILURES.findall(score.log if score else "")))
    unexpected = [f for f in verifier_failures if not EXPECTED_OFFLINE.fullmatch(f)]
    agent_failures = sorted(set(NETWORK_FAILURES.findall(s.reference_log)))
    unmet = "; ".join(staging.get("missing") or [])
    if score is None:
        seen.append(f"agent phase: offline ({agent}), no reference solution to replay; verifier phase: offline")
    elif score.solved:
        seen.append(f"agent phase: offline ({agent}), the reference solved the task; verifier phase: offline "
                    f"({verifier}), {fmt(score)}")
    else:
        # a failed reference is gate 1's verdict; it is gate 3's only when a download failed in a phase
        if agent_failures:
            problems.append(f"agent phase: the reference needs the network; replayed offline it did not solve the "
                            f"task ({fmt(score)}): " + "; ".join(agent_failures[:4]))
        if unexpected or unmet:
            problems.append(f"verifier phase needs the network ({fmt(score)}): "
                            + "; ".join(unexpected[:4] + ([f"not staged: {unmet}"] if unmet else []))
                            + f"; its output: {score.log[-600:]!r}")
        if not agent_failures and not (unexpected or unmet):
            seen.append(f"agent phase: offline ({agent}); verifier phase: offline ({verifier}); the reference did "
                        f"not score 1 ({fmt(score)}, gate 1 says why), with no sign of a download in either phase")
    if verifier_failures:
        seen.append("the verifier's own downloads failed offline: " + "; ".join(verifier_failures[:4]))
    if staging:
        seen.append(f"staged at build time for test.sh: {_staged(staging)}")
        if unmet and score is not None and score.solved:
            seen.append(f"not staged, and the solved reference did without: {unmet}")
    detail = "; ".join(problems + seen)
    return not problems, detail or "network unreachable in both phases"


def _staged(staging: dict) -> str:
    needs, parts = staging.get("needs") or {}, []
    if needs.get("apt"):
        parts.append("apt " + " ".join(needs["apt"]))
    if staging.get("uv_version"):
        parts.append(f"uv {staging['uv_version']}")
    if staging.get("wheels"):
        parts.append(f"{len(staging['wheels'])} wheels for Python {staging.get('python')}")
    return ", ".join(parts) or "nothing"


async def _gate_starts(s: GateContext) -> tuple[bool, str]:
    deadline = min(s.cfg.cold_start_deadline_sec, float(s.task.metadata.get("build_timeout_sec") or "inf"))
    times = []
    for i in range(s.cfg.cold_starts):
        start = time.monotonic()
        parent = None
        try:
            async with asyncio.timeout(deadline):
                parent = await s.backend.prepare(s.offline_env, f"{s.task.id}-cold{i}-{uuid.uuid4().hex[:8]}")
                async with closing(await parent.fork()) as child:
                    result = await child.exec("true", timeout_sec=deadline)
                if result.exit_code != 0:
                    return (
                        False,
                        f"cold start {i + 1}: a command in the new sandbox exited {result.exit_code}",
                    )
        except TimeoutError:
            return False, f"cold start {i + 1} of {s.cfg.cold_starts} exceeded the {deadline:.1f} s deadline"
        except Exception as e:  # noqa: BLE001 - a failed start is this gate's verdict, not a validator crash
            return False, f"cold start {i + 1} failed: {type(e).__name__}: {e}"[:500]
        finally:
            if parent is not None:
                with contextlib.suppress(Exception):
                    await parent.close()
        times.append(time.monotonic() - start)
    return True, f"{len(times)} cold starts, slowest {max(times):.2f} s (deadline {deadline:.1f} s)"


def _distinctive_lines(task: Task, min_chars: int) -> list[str]:
    """Lines of the solution scripts that would give the answer away if found in the environment."""
    scripts = [task.solution_path] if task.solution_path else []
    if task.path is not None:
        scripts += sorted((task.path / "solution").glob("alt_*.sh"))
    lines = set()
    for script in scripts:
        if script is None or not script.is_file():
            continue
        for line in script.read_text(errors="replace").splitlines():
            text = line.strip()
            long_enough = len(text) >= min_chars
            if (
                long_enough
                and not text.startswith("#")
                and not SHELL_OPTIONS.match(text)
                and text not in task.instruction
            ):
                lines.add(text)
    return sorted(lines)


async def _answer_lines(s: GateContext, max_bytes: int = 1 << 20) -> list[str] | None:
    """Lines the reference solution writes that the environment did not have, and its scripts' distinctive
    lines: what kept git history must not hold (gate 5). None: no reference solution to run."""
    task = s.task
    if task.solution_path is None or not task.solution_path.is_file():
        return None
    if s.solved is None:
        await s.run_reference()
    assert s.solved is not None
    parent, lines = await s.prepare(), set(_distinctive_lines(task, s.cfg.leak_min_line_chars))
    for path in s.changed:
        try:
            new = await s.solved.read_file(path)
        except OSError:
            continue  # deleted by the solution
        if len(new) > max_bytes:
            continue
        try:
            old = set((await parent.read_file(path)).decode("utf-8", "replace").splitlines())
        except OSError:
            old = set()
        for line in new.decode("utf-8", "replace").splitlines():
            text = line.strip()
            if len(text) >= s.cfg.leak_min_line_chars and line not in old and text not in task.instruction:
                lines.add(text)
    return sorted(lines)[:2000]


def _judge_kept_history(
    task: Task, left: list[str], answers: list[list[str]] | None
) -> tuple[list[str], str, str]:
    """Gate 5 on history a task keeps (its point is its git state: a dangling commit to recover, a branch to
    merge): (leaks, note, fix). The reference solution's output in an object reached otherwise than the task's
    declared ``git_premise`` is a leak; reached only that way, the premise (a note), as is history without it."""
    note = f"note: {KEEP_FIELD} = true, so git history was kept: " + "; ".join(left[:12])
    premise = task.metadata.get(PREMISE_FIELD) or []
    if answers is None:
        return [], note + "; not checked for the answer (no reference solution whose output to look for)", ""
    leaks = [(repo, kind, sha) for repo, kind, sha in answers if kind not in premise]
    if not leaks:
        held = f"the answer it holds is the task's premise ({PREMISE_FIELD} = {premise})" if answers else (
            "none of it holds the reference solution's output")
        return [], f"{note}; {held}", ""
    problems = [
        f"{repo.removesuffix('/.git')}: git history reached by {kind} holds the reference solution's output "
        f"(blob {sha[:10]}), which {PREMISE_FIELD} = {premise} does not declare as the task's premise"
        for repo, kind, sha in leaks
    ]
    fix = (
        f" (if recovering it is the task, declare how it is reached: [environment] {PREMISE_FIELD} = "
        f"{sorted({k for _, k, _ in leaks} | set(premise))}; else remove it from the environment)"
    )
    return problems, "", fix


async def _gate_no_leaks(s: GateContext) -> tuple[bool, str]:
    task, problems = s.task, []
    workdir = shlex.quote(task.environment.workdir)
    hidden = ["/tests", "/solution", "/logs/verifier"]
    if task.path is not None:
        hidden += [str(task.path), str(task.path / "tests"), str(task.path / "solution")]
    if task.grader.tests_dir is not None:
        hidden.append(str(task.grader.tests_dir))
    async with closing(await (await s.prepare()).fork()) as agent:
        # an empty /tests or /logs mount point is fine; any content in it, or any host path of the task, is not
        reach = await agent.exec(
            "for p in "
            + " ".join(shlex.quote(h) for h in hidden)
            + '; do { [ -f "$p" ] || [ -n "$(ls -A "$p" 2>/dev/null)" ]; } && echo "$p"; done; true',
            timeout_sec=30,
        )
        problems += [f"{p} is reachable from the agent's sandbox" for p in reach.preview.split()]
        lines = _distinctive_lines(task, s.cfg.leak_min_line_chars)
        if lines:
            end = f"FF_PATTERNS_{uuid.uuid4().hex}"
            patterns = "\n".join(lines)
            found = await agent.exec(
                f"grep -rlFf - -- {workdir} 2>/dev/null <<'{end}'\n{patterns}\n{end}\ntrue", timeout_sec=60
            )
            copies = [f for f in found.preview.split() if f not in s.changed]
            problems += [f"{f} contains lines of the reference solution" for f in copies]
        git = await agent.exec(CHECK_GIT, timeout_sec=120)
        left = [f"{repo}: {finding}" for repo, finding in git_findings(git.preview)]
        answers = None
        if left and task.metadata.get(KEEP_FIELD):
            patterns = await _answer_lines(s)
            if patterns:
                found = await agent.exec(answer_in_git(patterns), timeout_sec=300)
                answers = [line.split("\t") for line in found.preview.splitlines() if line.count("\t") == 2]
    note = fix = ""
    if left and task.metadata.get(KEEP_FIELD):
        leaks, note, fix = _judge_kept_history(task, left, answers)
        problems += leaks
    else:
        problems += left
        fix = (
            f" (task preparation strips git history beyond HEAD, fireflash.tasks.git_strip; a task that "
            f"needs it sets [environment] {KEEP_FIELD} = true)"
        ) if left else ""
    if problems:
        shown = "; ".join(problems[:50]) + (f"; ... and {len(problems) - 50} more" if len(problems) > 50 else "")
        shown += fix
        return False, shown
    return True, note or "tests, solution and git history beyond HEAD are unreachable"


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


async def _gate_null_zero(s: GateContext) -> tuple[bool, str]:
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


async def _gate_not_fragile(s: GateContext) -> tuple[bool | None, str]:
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


async def _gate_malformed_ok(s: GateContext) -> tuple[bool, str]:
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


async def _gate_deterministic(s: GateContext) -> tuple[bool, str]:
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


GATES: dict[int, Callable[[GateContext], Awaitable[tuple[bool | None, str]]]] = {
    1: _gate_reference,
    2: _gate_stated,
    3: _gate_offline,
    4: _gate_starts,
    5: _gate_no_leaks,
    6: _gate_null_zero,
    7: _gate_not_fragile,
    8: _gate_malformed_ok,
    9: _gate_deterministic,
}
