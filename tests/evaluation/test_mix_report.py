"""`fireflash report` shows a task mix (issue 30): each source's trained share beside its weight, and a table."""

from __future__ import annotations

import pytest

from fireflash.evaluation.report import PANELS, panel_series, write_report
from fireflash.tracking import MetricsWriter, read_metrics

pytestmark = pytest.mark.unit


def test_the_report_draws_and_tabulates_the_mix_next_to_its_weights(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    for step, (a, s) in enumerate([(2, 1), (1, 2), (2, 1)], start=1):
        writer.write(step, {"mix/agentic/weight": 0.52, "mix/swe/weight": 0.48, "mix/agentic/drawn": float(a),
                            "mix/swe/drawn": float(s), "mix/agentic/trained": 1.0, "mix/swe/trained": 1.0,
                            "mix/agentic/drawn_share": 5 / 9, "mix/swe/drawn_share": 4 / 9,
                            "mix/agentic/trained_share": 0.5, "mix/swe/trained_share": 0.5})
    writer.close()
    panel = next(p for p in PANELS if p.name == "mix")
    assert list(panel_series(read_metrics(tmp_path), panel)) == [
        "mix/agentic/trained_share", "mix/agentic/weight", "mix/swe/trained_share", "mix/swe/weight"]
    out = write_report(tmp_path)
    assert (out / "mix.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "report.md").read_text()
    assert "| agentic | 0.520 | 5 | 0.556 | 3 | 0.500 |" in md and "| swe | 0.480 | 4 | 0.444 | 3 | 0.500 |" in md


def test_a_run_without_a_mix_has_no_mix_table(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.write(1, {"rollout/reward_mean": 0.5})
    writer.close()
    md = (write_report(tmp_path) / "report.md").read_text()
    assert "Task mix" not in md.split("Not logged by this run")[0] and "(mix/)" in md
