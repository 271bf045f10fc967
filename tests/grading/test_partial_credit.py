"""Calibrated partial credit (issue 27, RECIPE.md §3): checks a do-nothing or boilerplate attempt passes
earn nothing; a full solve is still 1.0."""

import pytest

from fireflash.grading.graders import partial_credit, score_tests
from fireflash.grading.verifier import VerifierOutput

pytestmark = pytest.mark.unit
FAILURE = "<failure message='no'/>"
FREE = ["test_outputs.test_output_exists", "test_outputs.test_input_unchanged"]


def report(**outcomes: bool) -> VerifierOutput:
    cases = "".join(
        f'<testcase classname="test_outputs" name="{n}">{"" if ok else FAILURE}</testcase>'
        for n, ok in outcomes.items()
    )
    return VerifierOutput({"junit.xml": f"<testsuites><testsuite>{cases}</testsuite></testsuites>".encode()},
                          0, False, "", 0.1)


def test_an_empty_output_file_no_longer_earns_two_thirds():
    empty = report(test_output_exists=True, test_input_unchanged=True, test_word_count=False)
    assert round(score_tests(empty).reward, 3) == 0.667  # uncalibrated: what the held-out case scored
    score = score_tests(empty, None, FREE)
    assert (score.reward, score.solved, score.checks_passed, score.checks_total) == (0.0, False, 2, 3)


def test_a_full_solve_is_still_one():
    full = report(test_output_exists=True, test_input_unchanged=True, test_word_count=True)
    score = score_tests(full, None, FREE)
    assert (score.reward, score.solved) == (1.0, True)


def test_partial_credit_counts_only_checks_that_are_not_free():
    outcome = {"exists": True, "lines": True, "words": False, "chars": False}
    assert partial_credit(outcome) == 0.5
    assert partial_credit(outcome, ["exists"]) == pytest.approx(1 / 3)  # honest: 1 of the 3 real checks
    assert partial_credit(outcome, ["exists", "lines", "words", "chars"]) == 0.0  # all free: binary reward
    assert partial_credit(dict.fromkeys(outcome, True), list(outcome)) == 1.0


def test_failing_a_free_check_still_costs():
    # right count, input deleted: not a full solve, so never 1.0 (uncalibrated it scored 0.667)
    outcome = {"test_outputs.test_output_exists": True, "test_outputs.test_input_unchanged": False, "count": True}
    assert partial_credit(outcome, FREE) == 0.5
    assert partial_credit({"a": False, "b": True}, ["a"]) == 0.5


def test_a_reward_file_ignores_free_checks():
    out = VerifierOutput({"reward.txt": b"0.5"}, 0, False, "", 0.1)
    assert score_tests(out, None, FREE).reward == 0.5
