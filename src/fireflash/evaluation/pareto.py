"""The cost / Pass@1 Pareto frontier across systems and settings (RECIPE.md §6).

    fireflash report pareto runs/eval/results.json --points examples/pareto_reference.csv --out runs/pareto

A point is on the frontier when no other point is at most as expensive and at least as accurate, and
strictly better in one of the two. Cost per trial is plotted on a log axis (systems differ by orders of
magnitude). Other systems' points come from a CSV with the header

    name,setting,cost_per_trial_usd,pass_at_1_pct[,benchmark]

(Pass@1 in percent, as reports publish it). An empty cost or Pass@1 means "not published": the point
is listed in the table but neither plotted nor considered for the frontier. A cost of 0 (a free system) is
a real value: the point counts for the frontier and is listed in the table, but a log axis cannot show $0,
so it is not drawn; the plot's footnote names it (and says when it is on the frontier). The optional ``benchmark``
column names the task set the Pass@1 was measured on (e.g. Terminal-Bench 4.0); our points carry the
task specs of their eval run and its task count. When the plotted points come from more than one
named task set, the plot and the table say that their positions are not a like-for-like ranking.
"""

from __future__ import annotations

import csv
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fireflash.evaluation.results import EvalResults

CSV_COLUMNS = ("name", "setting", "cost_per_trial_usd", "pass_at_1_pct")


class ParetoPoint(BaseModel):
    """One system at one setting: cost per trial (USD) and Pass@1 (fraction)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    setting: str = ""
    benchmark: str = Field("", description="Task set the Pass@1 was measured on, e.g. 'Terminal-Bench 4.0'; '' if unknown.")
    cost_per_trial_usd: float | None = Field(None, description="USD per trial; None if not published.")
    pass_at_1: float | None = Field(None, ge=0.0, le=1.0, description="Fraction in [0, 1]; None if not published.")
    ours: bool = Field(False, description="Measured by `fireflash eval` (highlighted on the plot).")

    @property
    def complete(self) -> bool:
        """Both values are known: the point takes part in the frontier (a cost of 0 included)."""
        return self.pass_at_1 is not None and self.cost_per_trial_usd is not None

    @property
    def plottable(self) -> bool:
        """Complete with a cost > 0: the log-cost axis can show it."""
        return self.complete and self.cost_per_trial_usd > 0

    @property
    def label(self) -> str:
        return f"{self.name} ({self.setting})" if self.setting else self.name


def _number(text: str, where: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text.removeprefix("$").removesuffix("%"))
    except ValueError:
        raise ValueError(f"{where} = {text!r}: expected a number or an empty cell (not published)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where} = {text!r}: must be a finite number >= 0")
    return value


def read_points_csv(path: str | Path) -> list[ParetoPoint]:
    """Points of other systems from a CSV with columns ``name,setting,cost_per_trial_usd,pass_at_1_pct``
    and optionally ``benchmark`` (files without it load with every benchmark '').

    Raises:
        FileNotFoundError: no such file.
        ValueError: a missing column, empty name, or a cell that is not a number / outside [0, 100] %;
            the message names the file, line and column.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: points CSV not found (see examples/pareto_reference.csv for the format)")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; the header must be {','.join(CSV_COLUMNS)}"
                             "[,benchmark]")
        points = []
        for line, row in enumerate(reader, start=2):
            where = f"{path}:{line}"
            name = (row["name"] or "").strip()
            if not name:
                raise ValueError(f"{where}: empty name")
            pct = _number(row["pass_at_1_pct"] or "", f"{where} pass_at_1_pct")
            if pct is not None and pct > 100:
                raise ValueError(f"{where} pass_at_1_pct = {pct}: a percentage in [0, 100] (46.2 means 46.2%)")
            points.append(ParetoPoint(
                name=name, setting=(row["setting"] or "").strip(), benchmark=(row.get("benchmark") or "").strip(),
                cost_per_trial_usd=_number(row["cost_per_trial_usd"] or "", f"{where} cost_per_trial_usd"),
                pass_at_1=None if pct is None else pct / 100,
            ))
    return points


def point_from_results(results: EvalResults, source: str) -> ParetoPoint:
    """Our eval run as a point; its benchmark is the run's task set and task count, e.g. 'bundled:heldout (11 tasks)'
    ('11 tasks' for results written before the task set was recorded).

    Raises:
        ValueError: the run has no cost (no prices were resolved) or no Pass@1; the message says how to fix it.
    """
    cost, p1 = results.overall.cost_per_trial_usd, results.overall.pass_at_k.get("1")
    if cost is None:
        raise ValueError(f"{source}: no cost per trial; rerun `fireflash eval` with evaluation.prices.* or a reference_model")
    if p1 is None:
        raise ValueError(f"{source}: no Pass@1 (every trial lost, or 1 not in evaluation.pass_at_k)")
    n = results.overall.n_tasks
    count = f"{n} task{'s' * (n != 1)}"
    benchmark = f"{results.task_set} ({count})" if results.task_set else count
    return ParetoPoint(name=results.model, setting=results.setting, benchmark=benchmark, cost_per_trial_usd=cost,
                       pass_at_1=p1, ours=True)


def pareto_frontier(points: Sequence[ParetoPoint]) -> list[int]:
    """Indices of the complete points (both values known, cost 0 included) no other point dominates, ordered by
    ascending cost.

    q dominates p when cost_q <= cost_p and pass_q >= pass_p with one strict. Identical points are all kept.
    """
    live = [i for i, p in enumerate(points) if p.complete]
    front = []
    for i in live:
        p = points[i]
        dominated = any(
            points[j].cost_per_trial_usd <= p.cost_per_trial_usd and points[j].pass_at_1 >= p.pass_at_1
            and (points[j].cost_per_trial_usd < p.cost_per_trial_usd or points[j].pass_at_1 > p.pass_at_1)
            for j in live if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i].cost_per_trial_usd, -points[i].pass_at_1))


def mixed_benchmark_note(points: Sequence[ParetoPoint]) -> str | None:
    """The warning that the compared points' Pass@1 values come from different task sets; None when at most
    one named task set is compared (points without a benchmark or a value are not counted)."""
    names = list(dict.fromkeys(p.benchmark for p in points if p.complete and p.benchmark))
    if len(names) < 2:
        return None
    return f"Pass@1 measured on different task sets ({'; '.join(names)}): positions are not a like-for-like ranking"


def pareto_table(points: Sequence[ParetoPoint]) -> str:
    """Markdown table of every point, cheapest first; unpublished values shown as '–'; points not on the plot
    say why; the mixed-task-set note (``mixed_benchmark_note``) under it when it applies."""
    front = set(pareto_frontier(points))
    order = sorted(range(len(points)), key=lambda i: (points[i].cost_per_trial_usd is None, points[i].cost_per_trial_usd or 0.0))
    lines = ["| system | setting | task set | $ / trial | Pass@1 | Pareto frontier |", "|---|---|---|---|---|---|"]
    for i in order:
        p = points[i]
        cost = "–" if p.cost_per_trial_usd is None else f"{p.cost_per_trial_usd:.4g}"
        acc = "–" if p.pass_at_1 is None else f"{p.pass_at_1:.1%}"
        mark = "yes" if i in front else ""
        if not p.plottable:
            why = "not plotted: $0 on a log axis" if p.complete else "not plotted"
            mark = f"{mark} ({why})" if mark else why
        lines.append(f"| {p.name}{' (ours)' if p.ours else ''} | {p.setting} | {p.benchmark} | {cost} | {acc} | {mark} |")
    note = mixed_benchmark_note(points)
    return "\n".join(lines) + "\n" + (f"\n**{note}.**\n" if note else "")


def _stack_footnotes(fig, notes: Sequence[tuple[str, dict]]) -> float:
    """Write ``notes`` (text, style) under the axes, first on top, each wrapped to the figure's width; return the
    figure fraction they take up from the bottom (for ``tight_layout(rect=...)``)."""
    renderer = fig.canvas.get_renderer()
    y = 0.01
    for text, style in reversed(notes):
        t = fig.text(0.01, y, text, va="bottom", parse_math=False, **style)  # "$0.7 ... $22" is no formula
        overflow = t.get_window_extent(renderer).width / (0.98 * fig.bbox.width)
        if overflow > 1:  # wrap to the characters that fit, measured on this very line
            t.set_text(textwrap.fill(text, int(len(text) / overflow), subsequent_indent="  ", break_on_hyphens=False))
        y += t.get_window_extent(renderer).height / fig.bbox.height + 0.008
    return y


def pareto_figure(points: Sequence[ParetoPoint], title: str = "Cost per trial vs Pass@1"):
    """The matplotlib Figure of ``plot_pareto``: plottable points (log-cost x axis), ours highlighted, the frontier as
    a step line; under the axes the mixed-task-set note, the $0 points (a log axis cannot show them; they count for
    the frontier) and the points with an unpublished value. The caller closes it.

    Raises:
        ValueError: no point has both a positive cost and a Pass@1.
    """
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [p for p in points if p.plottable]
    if not shown:
        raise ValueError("no point has both a cost per trial > 0 and a Pass@1; nothing to plot")
    frontier = pareto_frontier(points)
    front = [points[i] for i in frontier if points[i].plottable]  # a $0 one is named in a footnote instead
    mixed = mixed_benchmark_note(points)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    lo, hi = min(p.cost_per_trial_usd for p in shown), max(p.cost_per_trial_usd for p in shown)
    span = math.log(hi * 3) - math.log(lo / 2)
    for p in shown:
        on_front = any(p is f for f in front)
        ax.scatter(p.cost_per_trial_usd, 100 * p.pass_at_1, s=90 if p.ours else 50, zorder=3,
                   marker="*" if p.ours else "o", color="tab:red" if p.ours else ("tab:blue" if on_front else "tab:gray"),
                   edgecolor="black", linewidth=0.5)
        right_half = (math.log(p.cost_per_trial_usd) - math.log(lo / 2)) / span > 0.55  # label inward, inside the axes
        label = f"{p.label}\n{p.pass_at_1:.1%} @ ${p.cost_per_trial_usd:.3g}"
        if mixed and p.benchmark:  # say which task set, where they differ
            label += "\n" + textwrap.fill(f"on {p.benchmark}", 48, break_on_hyphens=False)
        ax.annotate(label, (p.cost_per_trial_usd, 100 * p.pass_at_1),
                    textcoords="offset points", xytext=(-7, 5) if right_half else (7, 5),
                    ha="right" if right_half else "left", fontsize=8, parse_math=False)
    xs = [f.cost_per_trial_usd for f in front]
    ys = [100 * f.pass_at_1 for f in front]
    if front:  # empty when $0 points dominate every plotted one
        # staircase: the best Pass@1 reachable at each cost, extended to the right edge of the plot
        ax.step(xs + [hi * 3], ys + [ys[-1]], where="post", color="tab:blue", linestyle="--", linewidth=1.2,
                label="Pareto frontier")
    ax.set_xscale("log")
    ax.set_xlim(lo / 2, hi * 3)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"${v:g}"))
    notes = [(mixed, {"fontsize": 8, "color": "darkred"})] if mixed else []
    free = [i for i, p in enumerate(points) if p.complete and not p.plottable]
    if free:
        notes.append(("not plotted (a log axis cannot show $0): " + "; ".join(
            f"{points[i].label} {points[i].pass_at_1:.1%} @ $0" + (" (on the Pareto frontier)" if i in frontier else "")
            for i in free), {"fontsize": 7, "color": "dimgray"}))
    hidden = [p for p in points if not p.complete]
    if hidden:
        notes.append(("not plotted (value not published): " + "; ".join(
            p.label + (f" ${p.cost_per_trial_usd:g}" if p.cost_per_trial_usd is not None
                       else f" {p.pass_at_1:.1%}" if p.pass_at_1 is not None else "")
            for p in hidden), {"fontsize": 7, "color": "dimgray"}))
    ax.set_ylim(max(-2.0, min(ys + [100 * p.pass_at_1 for p in shown]) - 10), min(100.0, max(100 * p.pass_at_1 for p in shown) + 10))
    ax.set_xlabel("cost per trial (USD, log scale)")
    ax.set_ylabel("Pass@1 (%)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if front:
        ax.legend(loc="lower right")
    fig.tight_layout(rect=(0, _stack_footnotes(fig, notes) if notes else 0, 1, 1))
    return fig


def plot_pareto(points: Sequence[ParetoPoint], path: Path, title: str = "Cost per trial vs Pass@1") -> Path:
    """Save ``pareto_figure(points, title)`` as a PNG at ``path``.

    Raises:
        ValueError: no point has both a positive cost and a Pass@1.
    """
    import matplotlib.pyplot as plt

    fig = pareto_figure(points, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_pareto(results_paths: Sequence[Path], points_csv: Path | None, out_dir: Path) -> tuple[Path, Path, list[ParetoPoint]]:
    """Read our results (results.json files or eval directories) and the CSV points; write ``pareto.png``
    and ``pareto.md`` into ``out_dir``.

    Raises:
        ValueError / FileNotFoundError: as ``EvalResults.load``, ``read_points_csv``, ``point_from_results``.
    """
    files = [Path(p) / "results.json" if Path(p).is_dir() else Path(p) for p in results_paths]
    points = [point_from_results(EvalResults.load(p), str(p)) for p in files]
    if points_csv is not None:
        points += read_points_csv(points_csv)
    if not points:
        raise ValueError("no points: pass eval results.json files and/or --points CSV")
    png = plot_pareto(points, Path(out_dir) / "pareto.png")
    md = Path(out_dir) / "pareto.md"
    md.write_text("# Cost / Pass@1 Pareto frontier\n\n![pareto](pareto.png)\n\n" + pareto_table(points))
    return png, md, points
