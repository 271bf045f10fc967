"""Scoring a verifier run: reward files, JUnit partial credit, FAIL_TO_PASS, and grader selection."""

import pytest

from fireflash.grading.graders import (
    FunctionGrader,
    GraderTimeout,
    IsolatedGrader,
    SweGrader,
    TestsGrader,
    make_grader,
    score_swe,
    score_tests,
)
from fireflash.grading.verifier import VerifierOutput
from fireflash.protocols import GraderSpec, Score

pytestmark = pytest.mark.unit


FAILURE = "<failure message='no'/>"


def junit(**outcomes):
    cases = "".join(
        f'<testcase classname="test_fix" name="{n}">{"" if ok else FAILURE}</testcase>'
        for n, ok in outcomes.items()
    )
    return f"<testsuites><testsuite>{cases}</testsuite></testsuites>".encode()


def output(**reports):
    return VerifierOutput({k.replace("_", "."): v for k, v in reports.items()}, 0, False, "log", 0.5)


def test_junit_partial_credit():
    score = score_tests(output(junit_xml=junit(test_a=True, test_b=False, test_c=True, test_d=True)))
    assert (score.reward, score.solved, score.checks_passed, score.checks_total) == (0.75, False, 3, 4)


def test_all_checks_pass_is_solved():
    score = score_tests(output(junit_xml=junit(test_a=True, test_b=True)))
    assert score.reward == 1.0 and score.solved and score.reason == ""


def test_reward_file_can_only_lower_the_junit_fraction():
    score = score_tests(output(reward_txt=b"0\n", junit_xml=junit(test_a=True, test_b=True)))
    assert (score.reward, score.solved, score.checks_passed, score.checks_total) == (0.0, False, 2, 2)
    # a reward file planted by code the tests ran cannot raise the reward above the checks passed
    score = score_tests(output(reward_txt=b"1\n", junit_xml=junit(test_a=True, test_b=False)))
    assert (score.reward, score.solved) == (0.5, False)
    score = score_tests(output(reward_json=b'{"reward": 1.0}'))
    assert (score.reward, score.solved, score.checks_passed, score.checks_total) == (1.0, True, 1, 1)


def test_missing_expected_check_counts_as_failed():
    score = score_tests(
        output(junit_xml=junit(test_a=True)), expected_checks=["test_fix.py::test_a", "test_fix.py::test_b"]
    )
    assert (score.reward, score.checks_total) == (0.5, 2)


@pytest.mark.parametrize(
    "reports,reason",
    [
        ({}, "no_report"),
        ({"reward_txt": b"lots"}, "bad_report"),
        ({"junit_xml": b"<oops"}, "bad_report"),
        ({"junit_xml": b"<testsuite/>"}, "no_checks"),
    ],
)
def test_unusable_reports_score_zero_with_reason(reports, reason):
    score = score_tests(output(**reports))
    assert (score.reward, score.solved, score.reason) == (0.0, False, reason)


def test_timeout_scores_zero_even_with_a_report():
    out = VerifierOutput({"reward.txt": b"1"}, None, True, "", 3.0)
    assert score_tests(out).reason == "timeout" and score_tests(out).reward == 0.0
    assert score_swe(out, ["a"], []).reason == "timeout"


def test_sandbox_failure_is_a_grader_error():
    out = VerifierOutput({}, None, False, "", 0.1, "cannot write /tests")
    assert score_tests(out).reason == "grader_error" and "cannot write /tests" in score_tests(out).log


def test_swe_fraction_of_fail_to_pass_fixed():
    out = output(junit_xml=junit(test_a=True, test_b=False, test_c=True, test_keep=True))
    score = score_swe(
        out, ["test_fix.py::test_a", "test_fix.py::test_b", "test_fix.py::test_c"], ["test_fix.py::test_keep"]
    )
    assert (score.reward, score.solved, score.checks_passed, score.checks_total) == (
        pytest.approx(2 / 3),
        False,
        3,
        4,
    )


def test_swe_broken_pass_to_pass_scores_zero():
    out = output(junit_xml=junit(test_a=True, test_keep=False))
    score = score_swe(out, ["test_fix.py::test_a"], ["test_fix.py::test_keep"])
    assert (score.reward, score.reason) == (0.0, "pass_to_pass_broken")


def test_swe_missing_pass_to_pass_counts_as_broken():
    score = score_swe(
        output(junit_xml=junit(test_a=True)), ["test_fix.py::test_a"], ["test_fix.py::test_gone"]
    )
    assert score.reward == 0.0


def test_swe_needs_fail_to_pass():
    with pytest.raises(ValueError, match="fail_to_pass"):
        score_swe(output(), [], [])


async def always_half(task, sandbox) -> Score:
    return Score(reward=0.5, solved=False)


class ConstantGrader:
    async def grade(self, task, sandbox) -> Score:
        return Score(reward=1.0, solved=True)


def test_make_grader_builtins_and_dotted_paths():
    assert isinstance(make_grader(GraderSpec(kind="tests")), TestsGrader)
    assert isinstance(make_grader("swe"), SweGrader)
    custom = make_grader(f"{__name__}.ConstantGrader")
    assert isinstance(custom, IsolatedGrader) and isinstance(custom.inner, ConstantGrader)
    custom = make_grader(f"{__name__}:always_half")
    assert isinstance(custom, IsolatedGrader) and isinstance(custom.inner, FunctionGrader)


@pytest.mark.parametrize(
    "kind,match",
    [
        ("nope", "not a built-in"),
        ("no.such.module.fn", "cannot import"),
        ("fireflash.protocols.SCHEMA_VERSION", "neither"),
    ],
)
def test_make_grader_rejects_unknown(kind, match):
    with pytest.raises(ValueError, match=match):
        make_grader(kind)


# ── fail closed (issue 27): every declared check is reported ──


def test_missing_declared_check_lowers_the_reward():
    """2 passing cases for a task declaring 3 checks: 2/3, not 1.0 (the report alone said 2/2)."""
    declared = ["test_fix.py::test_a", "test_fix.py::test_b", "test_fix.py::test_c"]
    score = score_tests(output(junit_xml=junit(test_a=True, test_b=True)), declared)
    assert (score.reward, score.solved, score.checks_passed, score.checks_total) == (
        pytest.approx(2 / 3),
        False,
        2,
        3,
    )
    assert "test_fix.py::test_c" in score.log


def test_declared_checks_ignore_extra_cases_and_fail_skipped_ones():
    declared = ["test_fix.py::test_a", "test_fix.py::test_b"]
    skipped = b'<testsuite><testcase classname="test_fix" name="test_a"/><testcase classname="test_fix" name="test_b"><skipped/></testcase><testcase classname="test_fix" name="test_forged"/></testsuite>'
    score = score_tests(output(junit_xml=skipped), declared)
    assert (score.reward, score.checks_total) == (0.5, 2)


def test_parametrised_declared_check_counts_each_case_and_fails_closed():
    declared = ["tests/test_fix.py::test_a"]
    cases = b'<testsuite><testcase classname="tests.test_fix" name="test_a[1]"/><testcase classname="tests.test_fix" name="test_a[x.y]"><failure/></testcase></testsuite>'
    score = score_tests(output(junit_xml=cases), [*declared, "tests/test_fix.py::test_gone"])
    assert (score.reward, score.checks_passed, score.checks_total) == (pytest.approx(1 / 3), 1, 3)
    cases = cases.replace(b"<failure/>", b"")
    assert score_tests(output(junit_xml=cases), declared).reward == 1.0


def test_declared_checks_without_junit_score_zero_even_with_a_reward_file():
    score = score_tests(output(reward_txt=b"1\n"), ["test_fix.py::test_a"])
    assert (score.reward, score.reason) == (0.0, "no_report")


def test_declared_checks_come_from_the_test_files_source(tmp_path):
    from fireflash.grading.reports import declared_checks

    (tmp_path / "test_a.py").write_text(
        "import os\ndef helper(): pass\ndef test_one(): pass\nasync def test_two(): pass\n"
        "class TestThing:\n    def test_m(self): pass\n    def other(self): pass\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b_test.py").write_text("def test_x(): pass\n")
    (tmp_path / "junit_runner.py").write_text("def test_not_a_check(): pass\n")
    (tmp_path / "test_broken.py").write_text("def test_(:\n")
    assert declared_checks(tmp_path) == [
        "sub/b_test.py::test_x",
        "test_a.py::test_one",
        "test_a.py::test_two",
        "test_a.py::TestThing::test_m",
    ]
    assert declared_checks(None) == [] and declared_checks(tmp_path / "nope") == []


def test_swe_renamed_fail_to_pass_test_is_a_failure():
    score = score_swe(
        output(junit_xml=junit(test_a_renamed=True, test_b=True)),
        ["test_fix.py::test_a"],
        ["test_fix.py::test_b"],
    )
    assert (score.reward, score.solved) == (0.0, False)


# ── custom graders cannot stall the loop (issue 27, item 5) ──


class SleepyGrader:
    """Blocks its caller with time.sleep on the first call (a custom grader written carelessly)."""

    def __init__(self, seconds):
        self.seconds, self.calls = seconds, 0

    async def grade(self, task, sandbox):
        import time

        self.calls += 1
        if self.calls == 1:
            time.sleep(self.seconds)  # noqa: ASYNC251 - the blocking call under test
        return Score(reward=1.0, solved=True)


def _task(verifier_timeout):
    from fireflash.protocols import Task, TaskLimits

    return Task(id="t-sleepy", instruction="x", limits=TaskLimits(verifier_timeout_sec=verifier_timeout))


def test_sleeping_custom_grader_returns_within_its_timeout_and_the_loop_keeps_running():
    import asyncio
    import time

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        t = asyncio.create_task(ticker())
        start = time.monotonic()
        with pytest.raises(GraderTimeout, match="ran past"):
            await IsolatedGrader(SleepyGrader(30)).grade(_task(1.0), sandbox=None)
        elapsed = time.monotonic() - start
        t.cancel()
        return elapsed, ticks

    elapsed, ticks = asyncio.run(main())
    assert elapsed < 1.0 + 2.0  # timeout + 2 s (the issue saw 20.3 s for a 10 s limit)
    assert ticks >= 10  # the event loop was never blocked


def test_hung_custom_grader_costs_the_attempt_one_retry():
    import asyncio

    from fireflash.rollout import attempts

    grader = IsolatedGrader(SleepyGrader(30))

    class FakeSandbox:
        async def fork(self):
            return self

        async def close(self):
            pass

    async def fake_run_attempt(task, sandbox, engine, tokenizer, harness, attempt_id):
        from fireflash.protocols import Status, Trajectory

        return Trajectory(task_id=task.id, attempt_id=attempt_id, status=Status.COMPLETED)

    async def parent():
        return FakeSandbox()

    original = attempts.run_attempt
    attempts.run_attempt = fake_run_attempt
    try:
        outcome = asyncio.run(
            attempts.scored_attempt(
                _task(0.5), parent, None, None, None, grader, "a0", max_retries=2, hang_margin_sec=5
            )
        )
    finally:
        attempts.run_attempt = original
    assert outcome.tries == 2 and not outcome.lost and outcome.score.reward == 1.0
    assert [e.type for e in outcome.errors] == ["GraderTimeout"]


def test_custom_grader_uses_the_sandbox_through_the_callers_loop():
    import asyncio

    class Recorder:
        def __init__(self):
            self.loop = None

        async def read_file(self, path):
            self.loop = asyncio.get_running_loop()
            return b"ok:" + path.encode()

    class ReadingGrader:
        async def grade(self, task, sandbox):
            data = await sandbox.read_file("/x")
            return Score(reward=1.0 if data == b"ok:/x" else 0.0, solved=True)

    async def main():
        rec = Recorder()
        score = await IsolatedGrader(ReadingGrader()).grade(_task(5.0), rec)
        return score, rec.loop is asyncio.get_running_loop()

    score, same_loop = asyncio.run(main())
    assert score.reward == 1.0 and same_loop


def test_tests_grader_counts_checks_the_test_file_declares_but_the_report_lacks(tmp_path, monkeypatch):
    """The issue's case: 2 passing cases, 3 declared checks, no ``expected_checks`` metadata → 2/3, not 1.0."""
    import asyncio

    from fireflash.grading import graders
    from fireflash.protocols import Task

    (tmp_path / "test_fix.py").write_text("def test_a(): pass\ndef test_b(): pass\ndef test_c(): pass\n")
    task = Task(id="t", instruction="x", grader=GraderSpec(tests_dir=tmp_path, test_command="true"))

    async def fake_verifier(task, sandbox):
        return output(junit_xml=junit(test_a=True, test_b=True))

    monkeypatch.setattr(graders, "run_verifier", fake_verifier)
    score = asyncio.run(TestsGrader().grade(task, None))
    assert (score.reward, score.solved, score.checks_total) == (pytest.approx(2 / 3), False, 3)
