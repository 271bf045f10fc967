"""Built-in graders: test-based partial credit ('tests') and FAIL_TO_PASS scoring ('swe').

Rewards follow RECIPE.md §3: one terminal reward R in [0, 1]; a full solve is 1.0; otherwise the
fraction of checks passed, not counting free checks (``partial_credit``); a software-engineering task scores the fraction of FAIL_TO_PASS tests it
fixes, and 0 if any PASS_TO_PASS test breaks. ``solved`` means every check passed.

Built-ins are chosen with a plain dict (STYLE.md 11, 13); any dotted path to a ``Grader`` class or to an
``async def grade(task, sandbox) -> Score`` function also works::

    grader = make_grader(task.grader)        # GraderSpec(kind="tests") → TestsGrader()
    score = await grader.grade(task, attempt_sandbox)
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import importlib
import inspect
import re
import threading
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from fireflash.grading.reports import (
    ReportError,
    declared_checks,
    match_checks,
    match_declared,
    parse_junit,
    parse_reward_json,
    parse_reward_txt,
)
from fireflash.grading.verifier import VerifierOutput, run_verifier
from fireflash.protocols import Grader, GraderSpec, Sandbox, Score, Task

LOG_TAIL_CHARS = 4000
NOT_RUN = "verifier_not_run"  # Score.reason: the tests never got to check anything (a missing tool, exit 127)
_MISSING_COMMAND = re.compile(r"^.*(?:command not found|: not found|No such file or directory).*$", re.MULTILINE)
_PYTEST_SUMMARY = re.compile(r"\b\d+ (?:passed|failed)\b")
IMPORT_ERROR = re.compile(
    r"^.*(?:ModuleNotFoundError|ImportError|collection failed|errors? during collection|ERROR collecting).*$",
    re.MULTILINE,
)


def _base(output: VerifierOutput) -> dict[str, Any]:
    log = output.log if not output.error else f"{output.log}\n[grader] {output.error}"
    return {"log": log[-LOG_TAIL_CHARS:], "duration_sec": round(output.duration_sec, 3)}


def _zero(output: VerifierOutput, reason: str, note: str = "", passed: int = 0, total: int = 0) -> Score:
    score = Score(
        reward=0.0, solved=False, checks_passed=passed, checks_total=total, reason=reason, **_base(output)
    )
    if note:
        score.log = f"{score.log}\n[grader] {note}"[-LOG_TAIL_CHARS:]
    return score


def why_not_run(output: VerifierOutput) -> str | None:
    """Why the test command never got to run a check (None: it ran some, or the evidence is not clear-cut).

    A verifier that never ran scores 0 for every attempt, which looks like a sound grader to anything that
    only reads rewards (issue 26: gates 6, 8 and 9 passed such tasks). Clear-cut signs, which nothing the
    agent writes can produce while the tests run their checks: the sandbox failed before the tests started;
    the test command exited 126 or 127 (a program it runs is missing or not executable: ``uvx`` without
    ``uv``, ``pytest`` not installed), or printed "command not found", and no JUnit report holds a check.
    A test file failing to import, or no report at all, may be the agent's doing (a module the tests
    import that it never wrote): ``gate_not_run`` judges those on the reference-solved state.
    """
    if output.timed_out:
        return None
    if output.error and not output.reports:
        return f"the grading sandbox failed: {output.error}"
    if _has_cases(output) or _PYTEST_SUMMARY.search(output.log or ""):
        return None
    lines = _MISSING_COMMAND.findall(output.log or "")
    last = lines[-1].strip()[:200] if lines else ""
    if output.exit_code in (126, 127):
        why = f"the test command exited {output.exit_code} (a program it runs is missing or not executable)"
        return why + (f": {last}" if last else "")
    not_found = [ln.strip()[:200] for ln in lines if "command not found" in ln]
    if not_found:
        return f"a program the test command runs is missing: {not_found[-1]}"
    return None


def _has_cases(output: VerifierOutput) -> bool:
    """Whether the JUnit report holds at least one check that ran (not only a collection error)."""
    try:
        checks = parse_junit(output.reports["junit.xml"])
    except (KeyError, ReportError):
        return False
    return any(c.passed or not IMPORT_ERROR.search(c.message or "") for c in checks)


def partial_credit(outcome: dict[str, bool], free_checks: Collection[str] = ()) -> float:
    """Calibrated partial credit (RECIPE.md §3): 1.0 for a full solve, else the checks passed that are not
    free, over the checks that are not free plus the free checks failed; 0.0 when every check is free.

    A free check is one a do-nothing or boilerplate attempt passes (``test_file_exists``); gate 6 finds them
    once per task and records them in its gate report (``GateReport.free_checks``). Passing one earns
    nothing; failing one (an attempt that deletes the input it was to keep) still costs, so an attempt that
    is not a full solve never reaches 1.0.

    Args:
        outcome: check id → passed, for every check of the task (non-empty).
        free_checks: ids of the task's free checks, in the same id space as ``outcome``.
    """
    if all(outcome.values()):
        return 1.0
    earned = sum(passed for check, passed in outcome.items() if check not in free_checks)
    counted = sum(check not in free_checks or not passed for check, passed in outcome.items())
    return earned / counted if counted else 0.0


def task_checks(task: Task) -> list[str]:
    """The check ids a task is scored over: ``metadata.expected_checks``, else every check its test files
    declare (``reports.declared_checks``); the id space of ``score_tests`` and of gate 6's free checks."""
    return task.metadata.get("expected_checks") or declared_checks(task.grader.tests_dir)


def score_tests(
    output: VerifierOutput, expected_checks: list[str] | None = None, free_checks: Collection[str] = ()
) -> Score:
    """Score a verifier run against the checks the task declares (RECIPE.md §3; fail closed, issue 27).

    With ``expected_checks`` (test node ids: the task's ``metadata.expected_checks`` or, by default in
    ``TestsGrader``, every test its files declare, ``reports.declared_checks``), reward = declared checks
    passed / declared checks: a check missing from the JUnit report (renamed, deleted, deselected, never
    collected) or skipped counts as failed, and cases the task does not declare count for nothing. A
    ``reward.txt``/``reward.json`` the tests wrote can only lower that fraction (the smaller one is
    taken). Without declared checks (a task whose tests are not test files) the reward file decides, else
    the JUnit report's own cases.

    Args:
        output: the raw verifier outcome.
        expected_checks: test ids that must appear (and pass) in the JUnit report.
        free_checks: checks that earn no partial credit (``partial_credit``, gate 6's calibration), in the
            id space of ``expected_checks`` (else of the JUnit report).

    Returns:
        A ``Score``; malformed or missing reports give reward 0 with ``reason`` 'bad_report' / 'no_report',
        a hung verifier gives reward 0 with reason 'timeout'.
    """
    if output.timed_out:
        return _zero(output, "timeout", total=len(expected_checks or []))
    if output.error and not output.reports:
        return _zero(output, "grader_error", total=len(expected_checks or []))
    why = why_not_run(output)
    if why is not None:
        return _zero(output, NOT_RUN, f"verifier did not run: {why}", total=len(expected_checks or []))
    try:
        checks = parse_junit(output.reports["junit.xml"]) if "junit.xml" in output.reports else None
        file_reward = None
        for name, parse in (("reward.json", parse_reward_json), ("reward.txt", parse_reward_txt)):
            if name in output.reports:
                file_reward = parse(output.reports[name])
                break
    except ReportError as e:
        return _zero(output, "bad_report", str(e), total=len(expected_checks or []))
    if expected_checks:
        if checks is None:
            return _zero(
                output,
                "no_report",
                f"the task declares {len(expected_checks)} checks but the tests wrote no junit.xml",
                total=len(expected_checks),
            )
        outcome = match_declared(expected_checks, checks)
    elif checks is not None:
        outcome = {c.id: c.passed for c in checks}
    elif file_reward is not None:
        solved = file_reward >= 1.0
        return Score(
            reward=file_reward, solved=solved, checks_passed=int(solved), checks_total=1, **_base(output)
        )
    else:
        return _zero(output, "no_report", "the tests wrote no reward.txt, reward.json or junit.xml")
    total, passed = len(outcome), sum(outcome.values())
    if total == 0:
        return _zero(output, "no_checks", "the JUnit report holds no test case")
    reward = partial_credit(outcome, free_checks)
    if file_reward is not None:
        reward = min(file_reward, reward)
    score = Score(
        reward=reward,
        solved=passed == total and reward >= 1.0,
        checks_passed=passed,
        checks_total=total,
        **_base(output),
    )
    failed = [k for k, v in outcome.items() if not v]
    if failed:
        note = f"declared checks failed, skipped or missing from the report: {', '.join(failed)}"
        score.log = f"{score.log}\n[grader] {note}"[-LOG_TAIL_CHARS:]
    return score


def score_swe(output: VerifierOutput, fail_to_pass: list[str], pass_to_pass: list[str]) -> Score:
    """Score a software-engineering attempt (RECIPE.md §3, §6: SWE-bench-style FAIL_TO_PASS).

    reward = fixed FAIL_TO_PASS / len(FAIL_TO_PASS), or 0 if any PASS_TO_PASS test fails or is missing.

    Raises:
        ValueError: ``fail_to_pass`` is empty (the task cannot be scored; fix the task's lists).
    """
    if not fail_to_pass:
        raise ValueError(
            "swe grader: GraderSpec.fail_to_pass is empty; list the test ids the fix must make pass"
        )
    if output.timed_out:
        return _zero(output, "timeout", total=len(fail_to_pass) + len(pass_to_pass))
    total = len(fail_to_pass) + len(pass_to_pass)
    if output.error and not output.reports:
        return _zero(output, "grader_error", total=total)
    why = why_not_run(output)
    if why is not None:
        return _zero(output, NOT_RUN, f"verifier did not run: {why}", total=total)
    if "junit.xml" not in output.reports:
        return _zero(output, "no_report", "the tests wrote no junit.xml", total=total)
    try:
        checks = parse_junit(output.reports["junit.xml"])
    except ReportError as e:
        return _zero(output, "bad_report", str(e), total=total)
    fixed = match_checks(fail_to_pass, checks)
    kept = match_checks(pass_to_pass, checks)
    passed = sum(fixed.values()) + sum(kept.values())
    if not all(kept.values()):
        broken = ", ".join(k for k, v in kept.items() if not v)
        return _zero(output, "pass_to_pass_broken", f"PASS_TO_PASS failing: {broken}", passed, total)
    reward = sum(fixed.values()) / len(fail_to_pass)
    return Score(
        reward=reward, solved=passed == total, checks_passed=passed, checks_total=total, **_base(output)
    )


class TestsGrader:
    """Runs the task's tests on a fork; JUnit partial credit over the declared checks (``score_tests``)."""

    __test__ = False  # not a pytest class

    async def grade(self, task: Task, sandbox: Sandbox) -> Score:
        output = await run_verifier(task, sandbox)
        return score_tests(output, task_checks(task), task.metadata.get("free_checks", ()))


class SweGrader:
    """Runs the task's tests on a fork; FAIL_TO_PASS / PASS_TO_PASS scoring (``score_swe``)."""

    async def grade(self, task: Task, sandbox: Sandbox) -> Score:
        output = await run_verifier(task, sandbox)
        return score_swe(output, task.grader.fail_to_pass, task.grader.pass_to_pass)


class FunctionGrader:
    """Adapts an ``async def grade(task, sandbox) -> Score`` function to the ``Grader`` protocol."""

    def __init__(self, fn: Callable[[Task, Sandbox], Awaitable[Score]]) -> None:
        self.fn = fn

    async def grade(self, task: Task, sandbox: Sandbox) -> Score:
        return await self.fn(task, sandbox)


GRADER_GRACE_SEC = 1.0
"""Seconds past ``task.limits.verifier_timeout_sec`` a custom grader may take before it is stopped."""


class GraderTimeout(RuntimeError):
    """A custom grader ran past its time limit and was stopped; the attempt's try fails and is retried."""


class _ThreadSandbox:
    """The attempt's sandbox as seen from a grader's worker thread: every call runs on the caller's loop.

    Sandboxes hold pipes bound to the loop that made them, so the grader's own loop (in its thread) asks
    that loop to do the work. After ``revoke`` (the grader timed out) every call raises, and the forks it
    made are closed by ``close_forks``.
    """

    def __init__(self, sandbox: Sandbox, loop: asyncio.AbstractEventLoop, forks: list[Sandbox]) -> None:
        self._sandbox, self._loop, self._forks = sandbox, loop, forks
        self.revoked = False

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.revoked:
            raise GraderTimeout("the grader's time is up; its sandbox is no longer available")
        future = asyncio.run_coroutine_threadsafe(getattr(self._sandbox, name)(*args, **kwargs), self._loop)
        return await asyncio.wrap_future(future)

    async def exec(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("exec", *args, **kwargs)

    async def read_file(self, path: str) -> bytes:
        return await self._call("read_file", path)

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        return await self._call("write_file", path, data, mode)

    async def fork(self) -> _ThreadSandbox:
        child = await self._call("fork")
        self._forks.append(child)
        return _ThreadSandbox(child, self._loop, self._forks)

    async def jobs(self) -> Any:
        return await self._call("jobs")

    async def kill_job(self, job_id: str) -> None:
        return await self._call("kill_job", job_id)

    async def diff(self) -> list[str]:
        return await self._call("diff")

    async def close(self) -> None:
        return await self._call("close")


class IsolatedGrader:
    """Runs a custom grader in a worker thread with its own event loop and a hard time limit.

    A custom grader is code the framework does not control: one that blocks (``time.sleep``, a busy loop,
    a synchronous subprocess) would stall every attempt sharing the event loop. Here it blocks only its
    thread; after ``timeout_sec`` (default: the task's verifier timeout + ``GRADER_GRACE_SEC``) ``grade``
    raises ``GraderTimeout`` (an infrastructure failure: ``scored_attempt`` retries the try, the loop never
    waits), the sandbox it was given stops answering, the forks it made are closed, and the thread gets an
    asynchronous ``GraderTimeout`` that stops it at its next Python bytecode. Not guaranteed: a grader
    stuck inside one C call (a long ``time.sleep``) keeps its thread until that call returns (a daemon
    thread: it never holds the process open), though it can no longer touch a sandbox.
    """

    def __init__(self, inner: Grader, timeout_sec: float | None = None) -> None:
        self.inner = inner
        self.timeout_sec = timeout_sec

    async def grade(self, task: Task, sandbox: Sandbox) -> Score:
        """The inner grader's score, or ``GraderTimeout`` past the limit (seconds); its errors propagate."""
        limit = self.timeout_sec or task.limits.verifier_timeout_sec + GRADER_GRACE_SEC
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Score] = loop.create_future()
        forks: list[Sandbox] = []
        proxy = _ThreadSandbox(sandbox, loop, forks)

        def deliver(ok: bool, value: Any) -> None:
            if not done.done():
                (done.set_result if ok else done.set_exception)(value)

        def work() -> None:
            try:
                score = asyncio.run(self.inner.grade(task, proxy))  # type: ignore[arg-type]
                loop.call_soon_threadsafe(deliver, True, score)
            except BaseException as e:  # noqa: BLE001 - handed to the caller, which decides
                try:
                    loop.call_soon_threadsafe(
                        deliver, False, e if isinstance(e, Exception) else RuntimeError(repr(e))
                    )
                except RuntimeError:  # the caller's loop is closed: nobody waits any more
                    pass

        thread = threading.Thread(target=work, name=f"grader-{task.id}", daemon=True)
        thread.start()
        try:
            async with asyncio.timeout(limit):
                return await asyncio.shield(done)
        except (TimeoutError, asyncio.CancelledError) as e:
            # timed out, or the attempt itself was cancelled: either way the grader must stop touching
            # the sandbox, which its caller is about to close
            proxy.revoked = True
            _raise_in_thread(thread, GraderTimeout)
            for fork in forks:
                # best effort: a fork that cannot close now is closed with its backend at the end
                with contextlib.suppress(Exception):
                    await fork.close()
            if isinstance(e, asyncio.CancelledError):
                raise
            raise GraderTimeout(
                f"grader {type(self.inner).__name__} for task {task.id} ran past its {limit:.1f} s limit "
                "(verifier timeout + GRADER_GRACE_SEC); stopped, the try is retried"
            ) from None


def _raise_in_thread(thread: threading.Thread, exc: type[BaseException]) -> None:
    """Ask CPython to raise ``exc`` in ``thread`` at its next bytecode (no-op if it already ended)."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc))


GRADERS: dict[str, type] = {"tests": TestsGrader, "swe": SweGrader}
"""Built-in grader names → classes (STYLE.md 13)."""


@functools.cache
def _resolve(path: str) -> Any:
    module, _, name = path.replace(":", ".").rpartition(".")
    if not module:
        raise ValueError(f"grader kind {path!r}: not a built-in ({', '.join(GRADERS)}) nor a dotted path")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(
            f"grader kind {path!r}: cannot import ({e}); use {', '.join(GRADERS)} or pkg.module.name"
        ) from None


def make_grader(spec: GraderSpec | str) -> Grader:
    """A grader for ``spec.kind``: a built-in name ('tests', 'swe') or a dotted path.

    A dotted path may name a class (instantiated without arguments, must have ``async grade``) or an
    ``async def grade(task: Task, sandbox: Sandbox) -> Score`` function. Such custom graders run under
    ``IsolatedGrader``: in a worker thread with a hard limit, so one that blocks cannot stall the loop.

    Raises:
        ValueError: unknown name, unimportable path, or an object that is neither.
    """
    kind = spec if isinstance(spec, str) else spec.kind
    if kind in GRADERS:
        return GRADERS[kind]()
    obj = _resolve(kind)
    if inspect.isclass(obj):
        obj = obj()
    if hasattr(obj, "grade"):
        return IsolatedGrader(obj)
    if inspect.iscoroutinefunction(obj):
        return IsolatedGrader(FunctionGrader(obj))
    raise ValueError(
        f"grader kind {kind!r}: {obj!r} is neither a Grader class nor an async grade(task, sandbox) function"
    )
