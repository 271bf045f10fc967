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

import functools
import importlib
import inspect
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from fireflash.grading.reports import (
    ReportError,
    match_checks,
    parse_junit,
    parse_reward_json,
    parse_reward_txt,
)
from fireflash.grading.verifier import VerifierOutput, run_verifier
from fireflash.protocols import Grader, GraderSpec, Sandbox, Score, Task

LOG_TAIL_CHARS = 4000


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


def score_tests(
    output: VerifierOutput, expected_checks: list[str] | None = None, free_checks: Collection[str] = ()
) -> Score:
    """Score a verifier run: reward file if the task wrote one, else JUnit partial credit (RECIPE.md §3).

    Args:
        output: the raw verifier outcome.
        expected_checks: test ids that must appear in the JUnit report; one that is missing counts as failed.
        free_checks: checks that earn no partial credit (``partial_credit``); a reward file ignores them.

    Returns:
        A ``Score``; malformed or missing reports give reward 0 with ``reason`` 'bad_report' / 'no_report',
        a hung verifier gives reward 0 with reason 'timeout'.
    """
    if output.timed_out:
        return _zero(output, "timeout")
    if output.error and not output.reports:
        return _zero(output, "grader_error")
    try:
        checks = parse_junit(output.reports["junit.xml"]) if "junit.xml" in output.reports else None
        for name, parse in (("reward.json", parse_reward_json), ("reward.txt", parse_reward_txt)):
            if name in output.reports:
                reward = parse(output.reports[name])
                passed = sum(c.passed for c in checks) if checks else int(reward >= 1.0)
                total = len(checks) if checks else 1
                solved = reward >= 1.0 and passed == total
                return Score(
                    reward=reward, solved=solved, checks_passed=passed, checks_total=total, **_base(output)
                )
    except ReportError as e:
        return _zero(output, "bad_report", str(e))
    if checks is None:
        return _zero(output, "no_report", "the tests wrote no reward.txt, reward.json or junit.xml")
    outcome = match_checks(expected_checks, checks) if expected_checks else {c.id: c.passed for c in checks}
    total, passed = len(outcome), sum(outcome.values())
    if total == 0:
        return _zero(output, "no_checks", "the JUnit report holds no test case")
    return Score(
        reward=partial_credit(outcome, free_checks),
        solved=passed == total,
        checks_passed=passed,
        checks_total=total,
        **_base(output),
    )


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
    """Runs the task's tests on a fork; reward file or JUnit partial credit (``score_tests``)."""

    __test__ = False  # not a pytest class

    async def grade(self, task: Task, sandbox: Sandbox) -> Score:
        output = await run_verifier(task, sandbox)
        return score_tests(output, task.metadata.get("expected_checks"), task.metadata.get("free_checks", ()))


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
    ``async def grade(task: Task, sandbox: Sandbox) -> Score`` function.

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
        return obj
    if inspect.iscoroutinefunction(obj):
        return FunctionGrader(obj)
    raise ValueError(
        f"grader kind {kind!r}: {obj!r} is neither a Grader class nor an async grade(task, sandbox) function"
    )
