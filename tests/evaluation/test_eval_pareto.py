"""The cost / Pass@1 frontier on hand-made point sets; the CSV format; the PNG and table; task sets."""

import json
from pathlib import Path

import pytest

from fireflash.evaluation.pareto import (
    ParetoPoint,
    pareto_figure,
    pareto_frontier,
    pareto_table,
    plot_pareto,
    point_from_results,
    read_points_csv,
    write_pareto,
)
from fireflash.evaluation.results import EvalResults, TrialResult, summarize

pytestmark = pytest.mark.unit
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pareto_reference.csv"


def pts(*rows):
    return [ParetoPoint(name=n, cost_per_trial_usd=c, pass_at_1=p) for n, c, p in rows]


def test_frontier_of_hand_made_points():
    points = pts(
        ("a", 0.5, 0.30),  # cheapest: on the frontier
        ("b", 1.0, 0.50),  # better and dearer: on
        ("c", 2.0, 0.45),  # dominated by b (dearer, worse)
        ("d", 4.0, 0.60),  # on
        ("e", 4.0, 0.55),  # same cost as d, worse: dominated
        ("f", 0.5, 0.20),  # same cost as a, worse: dominated
        ("g", 8.0, 0.60),  # same Pass@1 as d, dearer: dominated
    )
    assert [points[i].name for i in pareto_frontier(points)] == ["a", "b", "d"]


def test_identical_points_are_both_on_the_frontier_and_unpublished_are_ignored():
    points = pts(("a", 1.0, 0.5), ("b", 1.0, 0.5), ("x", None, 0.9), ("y", 0.1, None), ("w", None, None))
    assert sorted(points[i].name for i in pareto_frontier(points)) == ["a", "b"]


def test_a_free_point_counts_for_the_frontier_and_the_table_says_why_it_is_not_drawn():
    # $0 is a published value, not a missing one: it dominates every dearer, worse point
    points = pts(("free", 0.0, 0.5), ("dear", 0.0001063, 0.073), ("best", 2.0, 0.9))
    assert [points[i].name for i in pareto_frontier(points)] == ["free", "best"]
    table = pareto_table(points)
    assert "| free |  |  | 0 | 50.0% | yes (not plotted: $0 on a log axis) |" in table
    assert "| dear |  |  | 0.0001063 | 7.3% |  |" in table
    assert [points[i].name for i in pareto_frontier(pts(("free", 0.0, 0.5), ("also", 0.0, 0.2)))] == ["free"]
    assert "| also |  |  | 0 | 20.0% | not plotted: $0 on a log axis |" in pareto_table(pts(("free", 0.0, 0.5), ("also", 0.0, 0.2)))


def test_plot_names_free_points_in_a_footnote_and_keeps_the_footnotes_stacked():
    import matplotlib.pyplot as plt

    reference = read_points_csv(EXAMPLE)  # brings the mixed-task-set note and an unpublished point
    free = ParetoPoint(name="A", benchmark="bundled:heldout (3 tasks)", cost_per_trial_usd=0.0, pass_at_1=0.5)
    ours = point_from_results(our_results(), "r.json")  # $0.01, 16.7%: dominated by A
    fig = pareto_figure(reference + [free, ours, ParetoPoint(name="blank")])
    try:
        renderer = fig.canvas.get_renderer()
        notes = sorted(fig.texts, key=lambda t: -t.get_position()[1])  # top to bottom
        texts = [t.get_text() for t in notes]
        assert [t[:24] for t in texts] == ["Pass@1 measured on diffe", "not plotted (a log axis ", "not plotted (value not p"]
        assert texts[1] == "not plotted (a log axis cannot show $0): A 50.0% @ $0 (on the Pareto frontier)"
        assert texts[2] == "not plotted (value not published): Fable 5 (max effort) $22.02; blank"
        boxes = [t.get_window_extent(renderer) for t in notes]
        x_label = fig.axes[0].get_tightbbox(renderer)
        assert boxes[2].y0 >= 0 and boxes[2].y1 < boxes[1].y0 and boxes[1].y1 < boxes[0].y0 and boxes[0].y1 < x_label.y0
        # the frontier line does not pass through ours: A, off the plot, dominates it
        (step,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "Pareto frontier"]
        assert 0.01 not in list(step.get_xdata())
    finally:
        plt.close(fig)
    fig = pareto_figure(pts(("free", 0.0, 0.5), ("dear", 1.0, 0.3)))  # every drawn point dominated: no frontier line
    try:
        assert not [line for line in fig.axes[0].get_lines() if line.get_label() == "Pareto frontier"]
        assert [t.get_text() for t in fig.texts] == [
            "not plotted (a log axis cannot show $0): free 50.0% @ $0 (on the Pareto frontier)"]
    finally:
        plt.close(fig)


def test_reference_csv_and_frontier():
    points = read_points_csv(EXAMPLE)
    by_name = {p.name.split(" ")[0]: p for p in points}
    assert by_name["FireFlash"].pass_at_1 == pytest.approx(0.462) and by_name["FireFlash"].cost_per_trial_usd == 0.72
    assert by_name["GPT-6.1"].pass_at_1 == pytest.approx(0.556) and by_name["GLM-5.3"].cost_per_trial_usd == 8.27
    assert by_name["Fable"].cost_per_trial_usd == 22.02 and by_name["Fable"].pass_at_1 is None
    front = [points[i].name.split(" ")[0] for i in pareto_frontier(points)]
    assert front == ["FireFlash", "GPT-6.1"]
    table = pareto_table(points)
    assert "| GLM-5.3 | max effort | Terminal-Bench 4.0 | 8.27 | 41.8% |  |" in table and "not plotted" in table


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("name,setting,cost\nx,,1\n", "missing column"),
        ("name,setting,cost_per_trial_usd,pass_at_1_pct\nx,,1,0.5x\n", ":2 pass_at_1_pct"),
        ("name,setting,cost_per_trial_usd,pass_at_1_pct\nx,,1,146\n", "percentage in"),
        ("name,setting,cost_per_trial_usd,pass_at_1_pct\n,,1,46\n", "empty name"),
        ("name,setting,cost_per_trial_usd,pass_at_1_pct\nx,,-1,46\n", ">= 0"),
    ],
)
def test_bad_csv_names_file_line_and_column(tmp_path, text, match):
    path = tmp_path / "points.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_points_csv(path)


def test_plot_writes_a_png(tmp_path):
    points = read_points_csv(EXAMPLE) + [ParetoPoint(name="ours", cost_per_trial_usd=0.01, pass_at_1=0.1, ours=True)]
    path = plot_pareto(points, tmp_path / "p.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_pareto(pts(("x", None, 0.5)), tmp_path / "q.png")


def our_results(task_set="bundled:heldout", n_tasks=3):
    """A priced eval run over ``n_tasks`` tasks, one solved in two trials."""
    trials = [TrialResult(task_id=f"t{i}", trial=j, attempt_id=f"t{i}/{j}", category="x", lost=False, solved=i == j == 0,
                          cost_usd=0.01) for i in range(n_tasks) for j in range(2)]
    overall, tasks, cats = summarize(trials, [1])
    return EvalResults(model="ours", setting="low", task_set=task_set, created_at="2026-01-01T00:00:00+00:00",
                       trials_per_task=2, ks=[1], overall=overall, tasks=tasks, categories=cats, trials=trials)


def test_csv_benchmark_column_is_optional(tmp_path):
    assert {p.benchmark for p in read_points_csv(EXAMPLE)} == {"Terminal-Bench 4.0"}
    without = tmp_path / "without.csv"
    without.write_text("name,setting,cost_per_trial_usd,pass_at_1_pct\nx,,1,50\n")
    assert [p.benchmark for p in read_points_csv(without)] == [""]
    with_it = tmp_path / "with.csv"  # any column order; an empty cell is an unknown task set
    with_it.write_text("benchmark,name,setting,cost_per_trial_usd,pass_at_1_pct\n SWE-bench Verified ,x,,1,50\n,y,,2,60\n")
    assert [(p.name, p.benchmark) for p in read_points_csv(with_it)] == [("x", "SWE-bench Verified"), ("y", "")]


def test_our_point_names_its_task_set_and_task_count():
    assert point_from_results(our_results(), "r.json").benchmark == "bundled:heldout (3 tasks)"
    assert point_from_results(our_results("tasks/a, bundled:heldout", 1), "r.json").benchmark == "tasks/a, bundled:heldout (1 task)"
    assert point_from_results(our_results(""), "r.json").benchmark == "3 tasks"  # results from before task_set


def test_table_has_a_task_set_column_and_says_when_task_sets_differ():
    reference = read_points_csv(EXAMPLE)
    ours = point_from_results(our_results(), "r.json")
    mixed = pareto_table(reference + [ours])
    assert mixed.splitlines()[0] == "| system | setting | task set | $ / trial | Pass@1 | Pareto frontier |"
    assert "| ours (ours) | low | bundled:heldout (3 tasks) | 0.01 | 16.7% | yes |" in mixed
    assert mixed.rstrip().endswith(
        "**Pass@1 measured on different task sets (Terminal-Bench 4.0; bundled:heldout (3 tasks)): "
        "positions are not a like-for-like ranking.**")
    # one task set, or one beside points of unknown or unplotted task sets: nothing to warn about
    assert "different task sets" not in pareto_table(reference)
    assert "different task sets" not in pareto_table(reference + pts(("unknown", 0.1, 0.2)))
    assert "different task sets" not in pareto_table(
        reference + [ParetoPoint(name="x", benchmark="SWE-bench Verified", cost_per_trial_usd=None, pass_at_1=0.5)])


def test_plot_footnotes_mixed_task_sets_above_not_plotted_without_overlap():
    import matplotlib.pyplot as plt

    reference = read_points_csv(EXAMPLE)
    fig = pareto_figure(reference + [point_from_results(our_results(), "r.json")])
    try:
        renderer = fig.canvas.get_renderer()
        (mixed,) = [t for t in fig.texts if t.get_text().startswith("Pass@1 measured on different task sets")]
        (hidden,) = [t for t in fig.texts if t.get_text().startswith("not plotted")]
        assert len(fig.texts) == 2 and "(Terminal-Bench 4.0; bundled:heldout (3 tasks))" in mixed.get_text()
        assert hidden.get_text() == "not plotted (value not published): Fable 5 (max effort) $22.02"
        axes, mixed_box, hidden_box = (a.get_window_extent(renderer) for a in (fig.axes[0], mixed, hidden))
        x_label = fig.axes[0].get_tightbbox(renderer)  # the axes with their tick labels and x label
        # stacked under the axes' labels, mixed on top, inside the figure, no two boxes overlapping
        assert hidden_box.y0 >= 0 and hidden_box.y1 < mixed_box.y0 and mixed_box.y1 < x_label.y0 < axes.y0
        assert mixed_box.x1 <= fig.bbox.width and hidden_box.x1 <= fig.bbox.width
        # on the plot each point says which task set it was measured on
        assert any(t.get_text().endswith("on bundled:heldout (3 tasks)") for t in fig.axes[0].texts)
    finally:
        plt.close(fig)
    fig = pareto_figure(reference)  # one task set: only the not-plotted line, and no "on ..." in the labels
    try:
        assert [t.get_text()[:11] for t in fig.texts] == ["not plotted"]
        assert not any("on Terminal-Bench" in t.get_text() for t in fig.axes[0].texts)
    finally:
        plt.close(fig)


def test_results_without_task_set_still_load_and_plot(tmp_path):
    data = json.loads(our_results().model_dump_json())
    assert data.pop("task_set") == "bundled:heldout"
    old = tmp_path / "old" / "results.json"  # as `fireflash eval` wrote it before the field existed
    old.parent.mkdir()
    old.write_text(json.dumps(data))
    assert EvalResults.load(old).task_set == ""
    _, md, points = write_pareto([old.parent], EXAMPLE, tmp_path / "out")
    assert points[0].benchmark == "3 tasks" and "| ours (ours) | low | 3 tasks |" in md.read_text()
    assert "different task sets (3 tasks; Terminal-Bench 4.0)" in md.read_text()
