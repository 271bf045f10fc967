"""Scoring a verifier run: reward files, JUnit partial credit, FAIL_TO_PASS, and grader selection."""

import pytest

from fireflash.grading.graders import (
    FunctionGrader,
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


def test_reward_file_wins_over_junit_and_keeps_check_counts():
    score = score_tests(output(reward_txt=b"0\n", junit_xml=junit(test_a=True, test_b=True)))
    assert (score.reward, score.solved, score.checks_passed, score.checks_total) == (0.0, False, 2, 2)
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
    assert isinstance(make_grader(f"{__name__}.ConstantGrader"), ConstantGrader)
    assert isinstance(make_grader(f"{__name__}:always_half"), FunctionGrader)


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
