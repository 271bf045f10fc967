"""`fireflash report` draws online curation's panels (issue 29 deliverable 4) from a run's metrics rows."""

from __future__ import annotations

import pytest

from fireflash.evaluation.report import PANELS, panel_series, write_report
from fireflash.tracking import MetricsWriter, read_metrics

pytestmark = pytest.mark.unit


def test_curation_panels_show_actual_vs_predicted_pool_quantiles_and_retirements(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    for step in range(1, 6):
        writer.write(step, {
            "curation/zero_signal_share": 0.5 - 0.05 * step, "curation/predicted_zero_signal_share": 0.45 - 0.05 * step,
            "curation/zero_signal_share_total": 0.4, "curation/predicted_zero_signal_share_total": 0.35,
            "curation/pool_pass_rate_p50": 0.5, "curation/pool_pass_rate_p10": 0.1, "curation/pool_pass_rate_p90": 0.9,
            "curation/retired_tasks": float(step), "curation/readmitted_total": 1.0,
        })
    writer.close()
    rows = read_metrics(tmp_path)
    panels = {p.name: p for p in PANELS}
    assert list(panel_series(rows, panels["curation_pool"])) == [
        "curation/pool_pass_rate_p10", "curation/pool_pass_rate_p50", "curation/pool_pass_rate_p90"]
    out = write_report(tmp_path)
    for name in ("curation", "curation_pool", "curation_retired"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "report.md").read_text()
    assert "| curation/predicted_zero_signal_share | 0.4 | 0.2 | 0.2 | 0.4 |" in md
    assert "| curation/retired_tasks | 1 | 5 | 1 | 5 |" in md
