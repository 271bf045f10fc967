"""Aggregation of trials into per-task / per-category / overall results, and the results file."""

import pytest

from fireflash.evaluation.results import EvalResults, TrialResult, markdown_tables, summarize
from fireflash.evaluation.runner import failure_reason
from fireflash.protocols import ErrorInfo, Score, Status, Trajectory
from fireflash.rollout.attempts import AttemptOutcome

pytestmark = pytest.mark.unit


def trial(task, i, cat, solved=False, lost=False, reward=None, out=100, cost=0.01, failure=""):
    if lost:
        return TrialResult(task_id=task, trial=i, attempt_id=f"{task}/{i}", category=cat, lost=True, failure="infrastructure:X")
    return TrialResult(
        task_id=task, trial=i, attempt_id=f"{task}/{i}", category=cat, lost=False, solved=solved,
        reward=1.0 if solved else (reward or 0.0), n_input_tokens=1000, n_cached_input_tokens=400, n_output_tokens=out,
        n_turns=3, wall_sec=2.0, cost_usd=cost, failure="" if solved else (failure or "unsolved:stop"),
    )


def sample_trials():
    return [
        # task a (cat x): 2 of 4 solved, one partial
        trial("a", 0, "x", solved=True), trial("a", 1, "x", solved=True), trial("a", 2, "x", reward=0.5), trial("a", 3, "x"),
        # task b (cat x): 1 lost, 1 of 3 graded solved
        trial("b", 0, "x", lost=True), trial("b", 1, "x", solved=True, out=400), trial("b", 2, "x"), trial("b", 3, "x"),
        # task c (cat y): nothing solved
        trial("c", 0, "y", failure="timeout"), trial("c", 1, "y"), trial("c", 2, "y"), trial("c", 3, "y"),
    ]


def test_summaries_by_hand():
    overall, tasks, cats = summarize(sample_trials(), [1, 2, 4])
    a, b, c = tasks
    assert (a.n_graded, a.n_solved, a.n_lost) == (4, 2, 0)
    assert a.pass_at_k == {"1": pytest.approx(0.5), "2": pytest.approx(1 - 1 / 6), "4": pytest.approx(1.0)}
    assert a.mean_reward == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    # b: 3 graded trials, pass@4 is undefined rather than guessed
    assert (b.n_graded, b.n_solved, b.n_lost) == (3, 1, 1)
    assert b.pass_at_k["1"] == pytest.approx(1 / 3) and b.pass_at_k["4"] is None
    assert b.mean_n_output_tokens == pytest.approx(200.0)
    assert b.failure_reasons == {"infrastructure:X": 1, "unsolved:stop": 2}
    assert c.cost_per_solve_usd is None and c.cost_per_trial_usd == pytest.approx(0.01)
    # overall: mean over tasks of per-task pass@1; pass@4 over the tasks that have it (a and c)
    assert overall.pass_at_k["1"] == pytest.approx((0.5 + 1 / 3 + 0) / 3)
    assert overall.pass_at_k["4"] == pytest.approx((1.0 + 0.0) / 2)
    assert (overall.n_tasks, overall.n_trials, overall.n_graded, overall.n_solved, overall.n_lost) == (3, 12, 11, 3, 1)
    assert overall.cost_per_solve_usd == pytest.approx(11 * 0.01 / 3)
    assert overall.failure_reasons["unsolved:stop"] == 7 and overall.failure_reasons["timeout"] == 1
    assert [k.category for k in cats] == ["x", "y"] and cats[0].n_tasks == 2
    assert cats[0].pass_at_k["1"] == pytest.approx((0.5 + 1 / 3) / 2)


def test_unpriced_trials_leave_cost_empty():
    trials = [trial("a", 0, "x", solved=True, cost=None), trial("a", 1, "x", cost=None)]
    overall, [a], _ = summarize(trials, [1])
    assert a.cost_per_trial_usd is None and overall.cost_per_solve_usd is None


def test_sampled_entropy_is_token_weighted_within_a_task_and_averaged_over_tasks():
    def rec(t, n, logq_sum):
        return t.model_copy(update={"n_sampled_tokens": n, "sampled_logprob_sum": logq_sum})

    trials = [rec(trial("a", 0, "x"), 4, -2.0), rec(trial("a", 1, "x"), 1, -1.0),  # a: 3 nats / 5 tokens
              rec(trial("b", 0, "x"), 10, -1.0), trial("b", 1, "x", lost=True)]    # b: lost trials do not count
    overall, (a, b), _ = summarize(trials, [1])
    assert a.sampled_entropy == pytest.approx(0.6) and b.sampled_entropy == pytest.approx(0.1)
    assert overall.sampled_entropy == pytest.approx(0.35)
    # one graded trial without the record (results from before it existed) leaves the task's entropy unknown
    overall, (a, _), _ = summarize(trials + [trial("a", 2, "x")], [1])
    assert a.sampled_entropy is None and overall.sampled_entropy == pytest.approx(0.1)


def test_results_roundtrip_and_tables(tmp_path):
    trials = sample_trials()
    overall, tasks, cats = summarize(trials, [1, 2])
    results = EvalResults(model="m", setting="low", task_set="bundled:heldout", created_at="2026-01-01T00:00:00+00:00",
                          trials_per_task=4, ks=[1, 2], overall=overall, tasks=tasks, categories=cats, trials=trials)
    results.save(tmp_path / "results.json")
    assert EvalResults.load(tmp_path / "results.json") == results
    md = markdown_tables(results)
    assert "# Evaluation: m (low)" in md and "| all | 3 | 11 | 1 | 27.8% |" in md and "| timeout | 1 |" in md
    assert "4 trials per task, 3 tasks from bundled:heldout, finished 2026-01-01" in md
    assert "3 tasks, finished" in markdown_tables(results.model_copy(update={"task_set": ""}))  # results from before it
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json"):
        EvalResults.load(tmp_path / "bad.json")


def test_failure_reason():
    traj = Trajectory(task_id="t", attempt_id="a", status=Status.TRUNCATED, finish_reason="max_turns")
    assert failure_reason(AttemptOutcome("t", "a", traj, Score(reward=0.2, solved=False), 1)) == "unsolved:max_turns"
    assert failure_reason(AttemptOutcome("t", "a", traj, Score(reward=0.0, solved=False, reason="timeout"), 1)) == "timeout"
    assert failure_reason(AttemptOutcome("t", "a", traj, Score(reward=1.0, solved=True), 1)) == ""
    lost = AttemptOutcome("t", "a", None, None, 3, [ErrorInfo(type="SandboxError", message="x")])
    assert failure_reason(lost) == "infrastructure:SandboxError"
    harness_failed = AttemptOutcome("t", "a", None, None, 1, [ErrorInfo(type="AttemptFailed", message="ScriptExhausted: no turn")])
    assert failure_reason(harness_failed) == "infrastructure:ScriptExhausted"
