"""A verifier that never ran is told apart from one that ran and failed every check (issue 26 Deliver 6).

``why_not_run`` gives the clear-cut cases (exit 127, "command not found", the sandbox failing) and the
tests grader scores them with reason 'verifier_not_run'; ``not_run_reason`` judges a score of the
reference-solved state, where a missing report or a test file that cannot import also means the tests
never ran (gates 1, 6, 8, 9).
"""

import pytest

from fireflash.grading.graders import NOT_RUN, score_swe, score_tests, why_not_run
from fireflash.grading.verifier import VerifierOutput
from fireflash.protocols import Score
from fireflash.curation.context import not_run_reason

pytestmark = pytest.mark.unit

TB2_LOG = "bash: line 3: curl: command not found\n/tests/test.sh: line 9: uvx: command not found\n"
COLLECTION = (
    "<testsuites><testsuite><testcase classname='test_outputs' name='test_a'>"
    "<failure message=\"collection failed: ModuleNotFoundError: No module named 'numpy'\"/></testcase>"
    "</testsuite></testsuites>"
).encode()


def out(reports=None, exit_code=0, log="", error="", timed_out=False):
    return VerifierOutput(reports or {}, exit_code, timed_out, log, 0.1, error)


@pytest.mark.parametrize(
    "output,why,reason",
    [
        (out(exit_code=127, log="/tests/test.sh: line 4: uvx: command not found"), "exited 127", NOT_RUN),
        (out(exit_code=126, log="/tests/run: Permission denied"), "exited 126", NOT_RUN),
        # Terminal-Bench 2's test.sh writes reward.txt = 0 after uvx failed, and exits 0
        (out({"reward.txt": b"0"}, exit_code=0, log=TB2_LOG), "uvx: command not found", NOT_RUN),
        # the grader's own reason for a sandbox failure stays; gates read it as "did not run" too
        (out(exit_code=None, error="sandbox died"), "the grading sandbox failed: sandbox died", "grader_error"),
    ],
)
def test_clear_cut_not_run_cases(output, why, reason):
    assert why in (why_not_run(output) or "")
    score = score_tests(output, ["test_outputs.py::test_a"])
    assert (score.reward, score.reason) == (0.0, reason)
    assert score_swe(output, ["test_outputs.py::test_a"], []).reason == reason
    assert not_run_reason(score) is not None


@pytest.mark.parametrize(
    "output",
    [
        out({"junit.xml": b"<testsuite><testcase classname='t' name='test_a'><failure message='x'/></testcase></testsuite>"},
            exit_code=127, log="uvx: command not found"),  # a check ran (the 127 came after)
        out({"reward.txt": b"0"}, exit_code=1, log="FAILED test_a\n1 failed, 2 passed in 0.1s\ncurl: command not found"),
        out({"reward.txt": b"0"}, exit_code=1, log="assert 3 == 4"),  # ran, failed: the agent's fault
        out({}, exit_code=None, timed_out=True),  # hung: reason 'timeout', not this
        out({"junit.xml": COLLECTION}, exit_code=1),  # maybe the agent's missing module: judged on the reference
    ],
)
def test_ran_or_unclear_is_not_flagged_by_the_grader(output):
    assert why_not_run(output) is None
    assert score_tests(output, ["test_outputs.py::test_a"]).reason != NOT_RUN


def test_not_run_reason_on_the_reference_state():
    failed_import = Score(reward=0.0, solved=False, checks_passed=0, checks_total=2,
                          log="test_outputs::test_a FAILED - collection failed: ModuleNotFoundError: No module named 'numpy'")
    assert "failed to import" in not_run_reason(failed_import)
    no_report = Score(reward=0.0, solved=False, reason="no_report",
                      log="python3: can't open file\n[grader] the tests wrote no reward.txt, reward.json or junit.xml")
    assert not_run_reason(no_report).startswith("no_report: [grader] the tests wrote no")
    wrong = Score(reward=0.5, solved=False, checks_passed=1, checks_total=2, log="assert 3 == 4")
    assert not_run_reason(wrong) is None
    assert not_run_reason(Score(reward=1.0, solved=True, log="ModuleNotFoundError in a check's output")) is None
