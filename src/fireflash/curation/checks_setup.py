"""Gates 1-4: the reference solves the task, the instruction states what the tests check, grading works
offline (network by phase, issue 26), and the sandbox starts within its deadline (RECIPE.md §3)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid

from fireflash.curation.context import GateContext, closing, fmt, not_run_reason
from fireflash.curation.requirements import task_stated
from fireflash.grading.verifier import grading_fork

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


async def gate_reference(s: GateContext) -> tuple[bool, str]:
    """Gate 1: the reference solution (solution/solve.sh) scores 1.0 and solves the task."""
    if s.task.solution_path is None or not s.task.solution_path.is_file():
        return False, "no reference solution (solution/solve.sh)"
    score = await s.run_reference()
    why = not_run_reason(score)
    if why is not None:
        return False, f"verifier did not run: {why}\n{score.log[-1000:]}"
    ok = score.solved and score.reward == 1.0
    return ok, fmt(score) + ("" if ok else f"\n{score.log[-1500:]}")


async def gate_stated(s: GateContext) -> tuple[bool, str]:
    """Gate 2: everything the tests check is stated by the instruction (``curation.requirements``)."""
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


async def gate_offline(s: GateContext) -> tuple[bool, str]:
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


async def gate_starts(s: GateContext) -> tuple[bool, str]:
    """Gate 4: the task's sandbox starts cold within ``cold_start_deadline_sec`` (or its build timeout)."""
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
