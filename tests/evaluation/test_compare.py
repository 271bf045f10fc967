"""`fireflash compare`: task-bootstrap CIs on hand-made sets, paired change and significance, task intersection, CLI outputs."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from fireflash.cli import app as cli_app
from fireflash.cli.evaluation import app
from fireflash.evaluation.compare import (
    bootstrap_mean_ci,
    compare_results,
    curve_ends,
    curve_window,
    load_results,
    paired_difference_ci,
    run_curves,
    table_rows,
    task_stats,
)
from fireflash.evaluation.results import EvalResults, TrialResult, summarize
from fireflash.protocols import Segment, Trajectory
from fireflash.tracking import MetricsWriter

pytestmark = pytest.mark.unit


def make_results(solved: dict[str, list[bool]], model="m", lost: dict[str, int] | None = None,
                 nats: float | None = None) -> EvalResults:
    """One task per key; ``solved[task]`` lists its graded trials, ``lost[task]`` adds lost trials after them.
    With ``nats``, every graded trial records 100 sampled tokens at log q = -nats each."""
    trials = []
    for tid, outcomes in solved.items():
        rows = [(s, False) for s in outcomes] + [(False, True)] * (lost or {}).get(tid, 0)
        for i, (ok, is_lost) in enumerate(rows):
            record = {} if nats is None or is_lost else {"n_sampled_tokens": 100, "sampled_logprob_sum": -100 * nats}
            trials.append(TrialResult(task_id=tid, trial=i, attempt_id=f"{tid}-{i}", category="c", lost=is_lost, solved=ok,
                                      reward=float(ok), n_output_tokens=0 if is_lost else 100, **record))
    overall, tasks, categories = summarize(trials, [1])
    return EvalResults(model=model, created_at="2025-01-01T00:00:00+00:00", trials_per_task=max(map(len, solved.values())),
                       ks=[1], overall=overall, tasks=tasks, categories=categories, trials=trials)


def eleven_tasks(n_solved: int, trials: int = 5) -> dict[str, list[bool]]:
    return {f"t{i:02d}": [i < n_solved] * trials for i in range(11)}


def test_all_equal_tasks_give_a_zero_width_interval():
    iv = bootstrap_mean_ci([0.6] * 8, n_resamples=2000, seed=1)
    assert iv.mean == pytest.approx(0.6) and iv.low == iv.high == pytest.approx(0.6)
    assert not bootstrap_mean_ci([0.0] * 5).excludes_zero


def test_interval_contains_the_mean_and_is_deterministic_with_the_seed():
    values = [0.0, 0.2, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 0.0, 0.4]
    iv = bootstrap_mean_ci(values, seed=7)
    assert iv.mean == pytest.approx(np.mean(values))
    assert iv.low < iv.mean < iv.high and 0.0 <= iv.low and iv.high <= 1.0
    # standard error of the mean ≈ 0.11 → a 95% interval about ±0.21 wide on each side
    assert 0.3 < iv.high - iv.low < 0.55
    assert bootstrap_mean_ci(values, seed=7) == iv
    # Pass@1 values sit on a lattice, so two seeds can agree on the quantiles; irregular values cannot
    irregular = [0.03, 0.17, 0.22, 0.41, 0.58, 0.79, 0.95, 0.99, 0.08, 0.36]
    assert bootstrap_mean_ci(irregular, seed=7) != bootstrap_mean_ci(irregular, seed=8)


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one task"):
        bootstrap_mean_ci([])
    with pytest.raises(ValueError, match="--resamples"):
        bootstrap_mean_ci([0.5], n_resamples=0)
    with pytest.raises(ValueError, match="aligned"):
        paired_difference_ci([0.1, 0.2], [0.3])


def test_paired_difference_sign_and_significance():
    a = make_results(eleven_tasks(3), model="base")
    b = make_results(eleven_tasks(8), model="rl")
    cmp = compare_results([("a/results.json", a), ("b/results.json", b)], ["A", "B"])
    base, rl = cmp.results
    assert base.delta is None and base.significant is None
    assert base.pass_at_1.mean == pytest.approx(3 / 11) and rl.pass_at_1.mean == pytest.approx(8 / 11)
    assert rl.delta.mean == pytest.approx(5 / 11) and rl.delta.low > 0 and rl.significant
    # the other way round the change is negative and still significant
    back = compare_results([("b", b), ("a", a)], ["B", "A"]).results[1]
    assert back.delta.mean == pytest.approx(-5 / 11) and back.delta.high < 0 and back.significant
    # one extra solved task out of 11 is within noise
    near = compare_results([("a", a), ("c", make_results(eleven_tasks(4)))], ["A", "C"]).results[1]
    assert near.delta.mean == pytest.approx(1 / 11) and near.delta.low <= 0 and not near.significant


def test_per_task_pass_at_1_excludes_and_counts_lost_trials():
    res = make_results({"x": [True, False, True, True], "y": [False, False], "z": []}, lost={"x": 1, "z": 3})
    stats = task_stats(res)
    assert set(stats) == {"x", "y"} and stats["x"].pass_at_1 == pytest.approx(0.75) and stats["x"].n_solved == 3
    row = compare_results([("r", res)]).results[0]
    assert row.n_lost == 4 and row.n_tasks == 2 and row.n_tasks_dropped == 1  # z: every trial lost
    assert row.output_tokens_per_solve == pytest.approx(600 / 3)  # 6 graded trials × 100 tokens / 3 solves
    none = compare_results([("r", make_results({"x": [False, False]}))]).results[0]
    assert none.output_tokens_per_solve is None and none.pass_at_1.mean == 0.0


def test_mismatched_task_sets_are_compared_on_their_intersection():
    a = make_results({"t1": [True], "t2": [False], "t3": [True], "only_a": [True]})
    b = make_results({"t3": [True], "t1": [True], "t2": [True], "only_b1": [False], "only_b2": [False]})
    cmp = compare_results([("a", a), ("b", b)], ["a", "b"])
    assert cmp.task_ids == ["t1", "t2", "t3"]
    assert [r.n_tasks_dropped for r in cmp.results] == [1, 2]
    assert cmp.results[0].pass_at_1.mean == pytest.approx(2 / 3) and cmp.results[1].pass_at_1.mean == 1.0
    with pytest.raises(ValueError, match="no task has a graded trial in every result"):
        compare_results([("a", a), ("c", make_results({"other": [True]}))])
    with pytest.raises(ValueError, match="one --label per RESULTS"):
        compare_results([("a", a), ("b", b)], ["only one"])


def test_entropy_is_compared_paired_over_tasks():
    base = make_results(eleven_tasks(3), model="base", nats=0.1)
    wider = make_results(eleven_tasks(3), model="rl", nats=0.3)
    cmp = compare_results([("a", base), ("b", wider)], ["A", "B"])
    a, b = cmp.results
    assert a.sampled_entropy.mean == pytest.approx(0.1) and a.entropy_delta is None
    assert b.sampled_entropy.mean == pytest.approx(0.3)
    assert b.entropy_delta.mean == pytest.approx(0.2) and b.entropy_delta.low > 0  # a rise, beyond noise
    # a result without the record (written before it existed, trajectories not saved) shows no entropy
    old = compare_results([("a", base), ("c", make_results(eleven_tasks(3)))]).results[1]
    assert old.sampled_entropy is None and old.entropy_delta is None
    assert table_rows(compare_results([("c", make_results(eleven_tasks(3)))]))[0][-4:-1] == ["–", "–", ""]


def test_entropy_of_old_results_is_read_from_their_saved_trajectories(tmp_path):
    # sampled tokens are the loss-mask ones: log q -0.5 and -1.5 → 1.0 nats per token; prompt tokens do not count
    seg = Segment(token_ids=[1, 2, 3, 4], loss_mask=[0, 1, 1, 0], rollout_logprobs=[0.0, -0.5, -1.5, -9.0],
                  topk_ids=[[], [2], [3], []], topk_logprobs=[[], [-0.5], [-1.5], []], weight_version=[-1, 0, 0, -1])
    traj = Trajectory(task_id="x", attempt_id="x-0", segments=[seg])
    assert traj.n_sampled_tokens == 2 and traj.sampled_logprob_sum == pytest.approx(-2.0)
    traj.save(tmp_path / "trajectories" / "x" / "t0.json")
    res = make_results({"x": [True]})
    res.trials[0].trajectory_path = "trajectories/x/t0.json"
    res.save(tmp_path / "results.json")
    [(path, loaded)] = load_results([tmp_path])
    assert loaded.trials[0].sampled_logprob_sum is None and task_stats(loaded)["x"].sampled_entropy is None
    assert task_stats(loaded, path.parent)["x"].sampled_entropy == pytest.approx(1.0)
    assert compare_results([(path, loaded)]).results[0].sampled_entropy.mean == pytest.approx(1.0)


def test_cli_shows_entropy_when_recorded(tmp_path):
    make_results(eleven_tasks(3), model="m-a", nats=0.1).save(tmp_path / "a" / "results.json")
    make_results(eleven_tasks(3), model="m-b", nats=0.3).save(tmp_path / "b" / "results.json")
    result = CliRunner().invoke(app, ["report", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                                      str(tmp_path / "cmp"), "--resamples", "500"])
    assert result.exit_code == 0, result.output
    assert "entropy" in result.output and "0.100" in result.output and "+0.200" in result.output
    assert "| 0.300 | +0.200 | [+0.200, +0.200] |" in (tmp_path / "cmp" / "compare.md").read_text()


def test_curve_ends_average_a_fifth_of_a_noisy_run():
    assert [curve_window(n) for n in (1, 5, 9, 10, 48, 100, 1000)] == [1, 1, 1, 2, 9, 10, 10]
    assert curve_ends([0.5, 2.0]) == (1, 0.5, 2.0)  # short runs keep their raw ends
    w, first, last = curve_ends([float(i) for i in range(20)] + [float("nan")])  # non-finite values are skipped
    assert (w, first, last) == (4, pytest.approx(1.5), pytest.approx(17.5))
    assert curve_ends([float("nan")]) is None and curve_ends([]) is None


def test_run_without_metrics_is_named(tmp_path):
    with pytest.raises(ValueError, match="metrics.jsonl: missing or empty"):
        run_curves([tmp_path])
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.write(1, {"trainer/idle_share": 0.2})
    writer.close()
    with pytest.raises(ValueError, match="logged none of rollout/reward_mean"):
        run_curves([tmp_path])


def test_cli_writes_plot_table_and_curves(tmp_path):
    paths = []
    for name, n in [("base", 1), ("sft", 3), ("rl", 8)]:
        make_results(eleven_tasks(n), model=f"m-{name}").save(tmp_path / name / "results.json")
        paths.append(str(tmp_path / name))
    sft_run, rl_run = tmp_path / "runs" / "sft", tmp_path / "runs" / "local"
    writer = MetricsWriter(sft_run, tensorboard=False)
    for step in range(1, 6):
        writer.write(step, {"loss": 2.0 / step, "accuracy": 0.1 * step})
    writer.close()
    writer = MetricsWriter(rl_run, tensorboard=False)
    for step in range(1, 16):  # long enough for a smoothed line (3-step mean)
        writer.write(step, {"rollout/reward_mean": 0.1 * step, "rollout/pass_rate": 0.1 * step, "entropy/mean": 0.5 - 0.01 * step,
                            "loss": -0.3})  # the GRPO loss: not drawn in the SFT loss panel
    writer.close()

    out = tmp_path / "cmp"
    result = CliRunner().invoke(app, ["report", "compare", *paths, "--run", str(sft_run), "--run", str(rl_run),
                                      "--out", str(out), "--resamples", "2000"])
    assert result.exit_code == 0, result.output
    assert "yes" in result.output and "+63.6" in result.output and "m-base" in result.output
    for png in ("compare.png", "curves.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "compare.md").read_text()
    assert "| base | m-base | 11 | 5 | 9.1 |" in md and "| rl | m-rl | 11 | 5 | 72.7 |" in md
    assert "+63.6 |" in md and "| loss | sft | 5 | 1 | 2 | 0.4 |" in md and "| entropy/mean | local | 15 | 3 | 0.48 | 0.36 |" in md
    assert "| loss | local |" not in md
    saved = json.loads((out / "compare.json").read_text())
    assert [r["significant"] for r in saved["results"]] == [None, False, True] and saved["n_resamples"] == 2000

    # the top-level alias, labels, and a bad file named in the error
    out2 = tmp_path / "cmp2"
    result = CliRunner().invoke(cli_app, ["compare", paths[0], paths[2], "-l", "B", "-l", "R", "--out", str(out2)])
    assert result.exit_code == 0, result.output
    assert (out2 / "compare.png").exists() and "| R |" in (out2 / "compare.md").read_text()
    (tmp_path / "bad.json").write_text("{}")
    bad = CliRunner().invoke(cli_app, ["compare", paths[0], str(tmp_path / "bad.json"), "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "bad.json" in bad.output and not (tmp_path / "x").exists()


def test_run_with_a_malformed_line_is_named_once(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "rollout/reward_mean": 0.1}\n{"rollout/reward_mean": 0.2}\n')
    with pytest.raises(ValueError) as err:
        run_curves([tmp_path])
    assert str(err.value) == f'{tmp_path / "metrics.jsonl"}:2: a metrics row needs an integer "step"; fix or delete that line'
