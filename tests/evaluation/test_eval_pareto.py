"""The cost / Pass@1 frontier on hand-made point sets; the CSV format; the PNG and table."""

from pathlib import Path

import pytest

from fireflash.evaluation.pareto import (
    ParetoPoint,
    pareto_frontier,
    pareto_table,
    plot_pareto,
    read_points_csv,
)

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
    points = pts(("a", 1.0, 0.5), ("b", 1.0, 0.5), ("x", None, 0.9), ("y", 0.1, None), ("z", 0.0, 0.99))
    assert sorted(points[i].name for i in pareto_frontier(points)) == ["a", "b"]


def test_reference_csv_and_frontier():
    points = read_points_csv(EXAMPLE)
    by_name = {p.name.split(" ")[0]: p for p in points}
    assert by_name["FireFlash"].pass_at_1 == pytest.approx(0.462) and by_name["FireFlash"].cost_per_trial_usd == 0.72
    assert by_name["GPT-6.1"].pass_at_1 == pytest.approx(0.556) and by_name["GLM-5.3"].cost_per_trial_usd == 8.27
    assert by_name["Fable"].cost_per_trial_usd == 22.02 and by_name["Fable"].pass_at_1 is None
    front = [points[i].name.split(" ")[0] for i in pareto_frontier(points)]
    assert front == ["FireFlash", "GPT-6.1"]
    table = pareto_table(points)
    assert "| GLM-5.3 | max effort | 8.27 | 41.8% |  |" in table and "not plotted" in table


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
