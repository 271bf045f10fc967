"""`fireflash report RUN_DIR`: plots and a Markdown summary of a training run's ``metrics.jsonl``.

    fireflash report runs/local          # → runs/local/report/{report.md, overview.png, <panel>.png}

Panels are the run's health signals (RECIPE.md §1, §5): reward, pass rate, policy entropy (should fall
slowly; a rise is the early warning), TIS clip shares (1–3% expected), drift |log π − log q| by
staleness bucket, the share of turns dropped as too stale, the zero-signal group share (and online curation's:
actual vs predicted, the pool's pass-rate quantiles, retired tasks; issue 29), a task mix's cumulative
share of trained groups per source beside its target weight (issue 30, also a table), trainer and
engine idle shares, the queue depth (complete groups waiting for the trainer after each step), and
tokens per attempt. A panel whose metrics the run never logged is listed as missing in the summary
rather than drawn empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fireflash.tracking import read_metrics


@dataclass(frozen=True)
class Panel:
    """One plot: ``keys`` are metric names, or a single prefix ending in '_' / '/' matching several (those ending
    in one of ``suffixes`` when they are given)."""

    name: str
    title: str
    keys: tuple[str, ...]
    ylabel: str
    share: bool = False  # values in [0, 1]: drawn on a fixed 0..1 axis
    from_zero: bool = False  # small non-negative values: start the axis at 0 so changes keep their scale
    suffixes: tuple[str, ...] = ()


PANELS = (
    Panel("reward", "Reward (mean over attempts)", ("rollout/reward_mean",), "R"),
    Panel("pass_rate", "Pass rate", ("rollout/pass_rate",), "share solved", share=True),
    Panel("entropy", "Policy entropy", ("entropy/mean",), "nats"),
    Panel("tis_clip", "TIS clip shares", ("tis/clip_low_share", "tis/clip_high_share"), "share of tokens", from_zero=True),
    Panel("drift", "Drift by staleness", ("drift/staleness_",), "mean |log π − log q| (nats)", from_zero=True),
    Panel("stale", "Stale share (turns dropped)", ("stale/dropped_share",), "share of tokens", from_zero=True),
    Panel("zero_signal", "Zero-signal group share", ("groups/zero_signal_share",), "share of groups", share=True),
    Panel("curation", "Zero-signal share: actual vs predicted by the curation state", (
        "curation/zero_signal_share", "curation/predicted_zero_signal_share", "curation/zero_signal_share_total",
        "curation/predicted_zero_signal_share_total"), "share of groups", share=True),
    Panel("curation_pool", "Pool pass rate (posterior mean over active tasks)", ("curation/pool_pass_rate_",),
          "pass rate", share=True),
    Panel("curation_retired", "Retired tasks (now) and re-probes (run total)",
          ("curation/retired_tasks", "curation/readmitted_total"), "tasks", from_zero=True),
    Panel("mix", "Task mix: share of trained groups by source (run so far) and its weight", ("mix/",),
          "share of groups", share=True, suffixes=("/trained_share", "/weight")),
    Panel("idle", "Idle shares", ("trainer/idle_share", "engine/idle_share"), "share of wall time", share=True),
    Panel("queue", "Queue depth (groups waiting for the trainer)", ("queue/groups",), "groups", from_zero=True),
    Panel("tokens", "Tokens per attempt", ("rollout/sampled_tokens_mean",), "sampled tokens"),
    Panel("memory", "Resident memory (after step / peak)", ("memory/rss_gb", "memory/peak_rss_gb"), "GiB", from_zero=True),
)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def panel_series(rows: list[dict[str, Any]], panel: Panel) -> dict[str, tuple[list[int], list[float]]]:
    """metric name → (steps, values) for the metrics of ``panel`` present in ``rows`` (missing steps skipped)."""
    if len(panel.keys) == 1 and panel.keys[0].endswith(("_", "/")):
        prefix, suffixes = panel.keys[0], panel.suffixes
        names = sorted({k for r in rows for k in r if k.startswith(prefix) and (not suffixes or k.endswith(suffixes))},
                       key=_bucket_order)
    else:
        names = [k for k in panel.keys if any(k in r for r in rows)]
    series = {}
    for name in names:
        pts = [(r["step"], _number(r[name])) for r in rows if name in r]
        series[name] = ([s for s, _ in pts], [v for _, v in pts])
    return series


def _bucket_order(name: str) -> tuple[int, str]:
    tail = name.rsplit("_", 1)[-1]
    head = tail.split("-")[0]
    return (int(head) if head.isdigit() else 10**9, name)


def style_step_axes(ax: Any, panel: Panel) -> None:
    """Title, labels, whole-number step ticks, the panel's y range and a light grid (run reports and ``compare``)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(panel.ylabel)
    if panel.share:
        ax.set_ylim(-0.02, 1.02)
    elif panel.from_zero:
        ax.set_ylim(bottom=0.0)
    ax.grid(True, alpha=0.3)


def _draw(ax: Any, panel: Panel, series: dict[str, tuple[list[int], list[float]]]) -> None:
    for name, (steps, values) in series.items():
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, linewidth=1.4,
                label=name.removeprefix(panel.keys[0]) if panel.keys[0].endswith(("_", "/")) else name)
    style_step_axes(ax, panel)
    if len(series) > 1 or panel.keys[0].endswith(("_", "/")):
        ax.legend(fontsize=7, title="staleness" if panel.name == "drift" else None, title_fontsize=7)


def _stats(values: list[float]) -> tuple[float, float, float, float]:
    finite = [v for v in values if math.isfinite(v)] or [math.nan]
    return finite[0], finite[-1], min(finite), max(finite)


def _mix_table(rows: list[dict[str, Any]]) -> list[str]:
    """report.md's task-mix table (issue 30): per source, the target weight and the run's groups and shares,
    drawn and trained, from the last row that has them; empty for a run without ``[tasks.mix]``."""
    last = next((r for r in reversed(rows) if any(k.startswith("mix/") for k in r)), None)
    if last is None:
        return []
    sources = sorted({k.split("/")[1] for k in last if k.startswith("mix/")})
    out = ["Task mix (`[tasks.mix]`; weights apply to groups drawn, zero-signal and lost groups never train):", "",
           "| source | weight | groups drawn | share drawn | groups trained | share trained |", "|---|---|---|---|---|---|"]
    for s in sources:
        drawn = sum(_number(r.get(f"mix/{s}/drawn", 0.0)) for r in rows)
        trained = sum(_number(r.get(f"mix/{s}/trained", 0.0)) for r in rows)
        out.append(f"| {s} | {_number(last.get(f'mix/{s}/weight')):.3f} | {drawn:.0f} | "
                   f"{_number(last.get(f'mix/{s}/drawn_share')):.3f} | {trained:.0f} | "
                   f"{_number(last.get(f'mix/{s}/trained_share')):.3f} |")
    return [*out, ""]


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Plot every panel and write ``report.md``; returns the report directory (default RUN_DIR/report).

    Raises:
        FileNotFoundError: RUN_DIR has no metrics.jsonl (the message says what produces it).
        fireflash.tracking.MetricsError: a malformed line (not a truncated last one; names file and line).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    if not rows:
        raise FileNotFoundError(f"{run_dir / 'metrics.jsonl'}: missing or empty; `fireflash train` writes it into tracking.run_dir")
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    drawn = [(p, s) for p in PANELS if (s := panel_series(rows, p))]
    missing = [p for p in PANELS if not panel_series(rows, p)]

    for panel, series in drawn:
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
        _draw(ax, panel, series)
        fig.tight_layout()
        fig.savefig(out / f"{panel.name}.png")
        plt.close(fig)
    if drawn:
        cols = 3
        nrows = math.ceil(len(drawn) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.3 * nrows), dpi=100, squeeze=False)
        for ax, (panel, series) in zip(axes.flat, drawn):
            _draw(ax, panel, series)
        for ax in list(axes.flat)[len(drawn):]:
            ax.axis("off")
        fig.suptitle(f"FireFlash run {run_dir.name}: {len(rows)} steps")
        fig.tight_layout()
        fig.savefig(out / "overview.png")
        plt.close(fig)

    lines = [f"# Run report: {run_dir}", "", f"{len(rows)} optimizer steps (steps {rows[0]['step']}–{rows[-1]['step']}).", ""]
    warnings = [r["step"] for r in rows if _number(r.get("entropy/warning", 0.0)) > 0]
    if warnings:
        lines += [f"**Entropy rising** (early warning, RECIPE.md §5) at steps {', '.join(map(str, warnings))}.", ""]
    lost = sum(_number(r.get("groups/lost_to_infrastructure", 0.0)) for r in rows)
    lines += [f"Groups lost to infrastructure: {lost:.0f}.", "", *_mix_table(rows),
              "![overview](overview.png)" if drawn else "", ""]
    lines += ["| metric | first | last | min | max |", "|---|---|---|---|---|"]
    for _panel, series in drawn:
        for name, (_steps, values) in series.items():
            lines.append("| " + " | ".join([name] + [f"{v:.4g}" for v in _stats(values)]) + " |")
    if missing:
        lines += ["", "Not logged by this run: " + ", ".join(f"{p.title} ({', '.join(p.keys)})" for p in missing) + "."]
    lines += ["", *[f"![{p.name}]({p.name}.png)" for p, _ in drawn], ""]
    (out / "report.md").write_text("\n".join(lines))
    return out
