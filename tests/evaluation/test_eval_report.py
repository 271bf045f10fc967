"""`fireflash report RUN_DIR` on a synthetic metrics.jsonl: every panel plotted, summary written."""

import math

import pytest
from typer.testing import CliRunner

from fireflash.cli.evaluation import app
from fireflash.evaluation.report import PANELS, panel_series, write_report
from fireflash.tracking import MetricsWriter

pytestmark = pytest.mark.unit


def synthetic_run(run_dir, steps=12):
    writer = MetricsWriter(run_dir, tensorboard=False)
    for step in range(1, steps + 1):
        m = {
            "rollout/reward_mean": 0.2 + 0.03 * step, "rollout/pass_rate": 0.1 + 0.04 * step,
            "entropy/mean": 0.46 - 0.01 * step, "entropy/warning": float(step == 12),
            "tis/clip_low_share": 0.01, "tis/clip_high_share": 0.02 + 0.001 * step,
            "drift/staleness_0": 0.05, "drift/staleness_1": 0.065, "drift/staleness_4-6": 0.08,
            "stale/dropped_share": 0.0 if step < 5 else 0.02, "groups/zero_signal_share": 0.5 - 0.02 * step,
            "trainer/idle_share": 0.3, "engine/idle_share": 0.1, "queue/groups": float(step % 4), "rollout/sampled_tokens_mean": 900 - 10 * step,
            "groups/lost_to_infrastructure": float(step == 3), "memory/rss_gb": 6.0, "memory/peak_rss_gb": 12.0 + 0.1 * step,
        }
        m |= {  # online curation (issue 29)
            "curation/zero_signal_share": 0.4 - 0.02 * step, "curation/predicted_zero_signal_share": 0.35 - 0.02 * step,
            "curation/zero_signal_share_total": 0.3, "curation/predicted_zero_signal_share_total": 0.28,
            "curation/pool_pass_rate_p10": 0.1, "curation/pool_pass_rate_p50": 0.5, "curation/pool_pass_rate_p90": 0.9,
            "curation/retired_tasks": float(step // 4), "curation/readmitted_total": float(step // 6),
        }
        m |= {"mix/swe/weight": 0.48, "mix/swe/trained_share": 0.5}  # a task mix (issue 30)
        if step > 2:
            m["drift/staleness_2-3"] = 0.07
        writer.write(step, m)
    writer.close()


def test_report_plots_every_panel(tmp_path):
    synthetic_run(tmp_path)
    out = write_report(tmp_path)
    for panel in PANELS:
        png = out / f"{panel.name}.png"
        assert png.read_bytes()[:4] == b"\x89PNG", panel.name
    assert (out / "overview.png").stat().st_size > 50_000
    md = (out / "report.md").read_text()
    assert "12 optimizer steps" in md and "Entropy rising" in md and "steps 12" in md
    assert "Groups lost to infrastructure: 1." in md
    assert "| entropy/mean | 0.45 | 0.34 | 0.34 | 0.45 |" in md
    assert "| queue/groups | 1 | 0 | 0 | 3 |" in md and "![queue](queue.png)" in md  # queue depth: steps 1..12 → step % 4
    assert "Not logged" not in md


def test_drift_buckets_in_staleness_order_and_missing_steps_skipped(tmp_path):
    synthetic_run(tmp_path)
    from fireflash.tracking import read_metrics

    rows = read_metrics(tmp_path)
    drift = panel_series(rows, next(p for p in PANELS if p.name == "drift"))
    assert list(drift) == ["drift/staleness_0", "drift/staleness_1", "drift/staleness_2-3", "drift/staleness_4-6"]
    assert drift["drift/staleness_2-3"][0] == list(range(3, 13))


def test_missing_panels_are_listed_not_drawn(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.write(1, {"rollout/reward_mean": 0.1, "entropy/mean": math.nan})
    writer.write(2, {"rollout/reward_mean": 0.2, "entropy/mean": 0.4})
    writer.close()
    out = write_report(tmp_path)
    assert (out / "reward.png").exists() and not (out / "tis_clip.png").exists()
    md = (out / "report.md").read_text()
    assert "Not logged by this run: Pass rate" in md and "Queue depth (groups waiting for the trainer) (queue/groups)" in md
    assert "| entropy/mean | 0.4 | 0.4 | 0.4 | 0.4 |" in md


def test_report_cli(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["report", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "metrics.jsonl" in missing.output
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.write(1, {"drift/staleness_0": 0.05, "drift/staleness_1": 0.06})
    writer.close()
    result = runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "report.md").exists() and (tmp_path / "r" / "drift.png").exists()


def test_report_of_a_killed_run_skips_its_torn_last_line(tmp_path, caplog):
    synthetic_run(tmp_path, steps=3)
    metrics = tmp_path / "metrics.jsonl"
    with metrics.open("a") as f:
        f.write('{"step": 4, "rollout/reward_m')  # what a kill in the middle of a write leaves
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    # a warning on stderr (logging's last-resort handler outside pytest, which captures it here)
    assert f"{metrics}:4: skipped a truncated last line" in caplog.text
    assert (tmp_path / "r" / "report.md").exists()


@pytest.mark.parametrize("bad,what", [('{"step": 2, "x\n', "not valid JSON"), ('{"x": 1}\n', 'needs an integer "step"')])
def test_report_names_a_malformed_line(tmp_path, bad, what):
    synthetic_run(tmp_path, steps=3)
    metrics = tmp_path / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join([lines[0], bad, *lines[1:]]))
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert result.output.strip().startswith(f"{metrics}:2: ") and what in result.output
    assert len(result.output.strip().splitlines()) <= 2  # one line (rich may wrap it)
