"""Compare held-out Pass@1 across eval runs (base → SFT → SFT+RL) with bootstrap confidence intervals.

    fireflash compare runs/eval/base runs/eval/sft runs/eval/rl --label base --label sft --label sft+rl \\
        --run runs/sft --run runs/local --out runs/compare    # → compare.{png,md,json}, curves.png

Pass@1 of a task is the mean of ``solved`` over its graded trials (lost trials excluded, counted); a
result's Pass@1 is the mean over tasks (RECIPE.md §6). Trials of one task are correlated, so the
task is the unit of resampling: the 95% interval is a percentile bootstrap over tasks, and the change
against the first (baseline) result is a paired bootstrap of per-task differences on the same task
draws. A change is "significant" when its interval excludes 0. The policy's entropy on the evaluated
tasks (nats per sampled token, ``results.sampled_entropy``) gets the same intervals: unlike the training
batches' entropy it is measured on one fixed task set for every checkpoint. Results are compared on the tasks
every one of them graded; tasks outside that intersection are dropped and counted.

Simplifications: percentile intervals (no BCa correction) are a little narrow for a handful of tasks;
with under ~10 tasks read them as indicative only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fireflash.evaluation.report import Panel, panel_series, style_step_axes
from fireflash.evaluation.results import EvalResults, TrialResult, sampled_entropy
from fireflash.protocols import Trajectory
from fireflash.tracking import MetricsError, read_metrics

RL_PANELS = (
    Panel("reward", "Reward (mean over attempts)", ("rollout/reward_mean",), "R"),
    Panel("pass_rate", "Pass rate (training)", ("rollout/pass_rate",), "share solved", share=True),
    Panel("entropy", "Policy entropy", ("entropy/mean",), "nats"),
)
# RL runs log a `loss` too (the GRPO objective); these panels draw only runs that look like `fireflash sft`
SFT_PANELS = (
    Panel("sft_loss", "SFT loss", ("loss",), "nats per assistant token", from_zero=True),
    Panel("sft_accuracy", "SFT token accuracy", ("accuracy",), "greedy top-1 share", share=True),
)
CURVE_PANELS = RL_PANELS + SFT_PANELS
_MAX_DRAW_CELLS = 1 << 22  # resample indices held at once (32 MiB of int64)


class Interval(BaseModel):
    """A point estimate with its bootstrap interval, all in the unit of the values (fractions for Pass@1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0


class ComparedResult(BaseModel):
    """One eval run on the compared (common) tasks."""

    model_config = ConfigDict(extra="forbid")

    label: str
    source: str = Field(description="The results.json read.")
    model: str
    n_tasks: int = Field(description="Tasks compared (the intersection).")
    n_tasks_dropped: int = Field(description="Tasks of this run outside the intersection (or with every trial lost).")
    trials_per_task: int
    pass_at_1: Interval
    delta: Interval | None = Field(None, description="Pass@1 minus the baseline's, paired over tasks; None for the baseline.")
    significant: bool | None = Field(None, description="The delta interval excludes 0; None for the baseline.")
    mean_reward: float
    n_solved: int
    output_tokens_per_solve: float | None = Field(description="Output tokens over graded trials / solves; None if no solve.")
    n_lost: int = Field(description="Trials lost to infrastructure in the whole file (not graded).")
    sampled_entropy: Interval | None = Field(
        None, description="Nats per sampled token, mean over tasks, bootstrap interval; None if a task lacks the record.")
    entropy_delta: Interval | None = Field(None, description="sampled_entropy minus the baseline's, paired over tasks.")


class Comparison(BaseModel):
    """What ``fireflash compare`` measured; saved as ``compare.json``."""

    model_config = ConfigDict(extra="forbid")

    task_ids: list[str] = Field(description="The compared tasks, in the baseline's order.")
    n_resamples: int
    seed: int
    level: float
    results: list[ComparedResult]


class TaskStats(NamedTuple):
    """One task of one result, over its graded trials."""

    pass_at_1: float  # solved / graded
    mean_reward: float
    n_output_tokens: int  # summed over graded trials
    n_solved: int
    sampled_entropy: float | None  # nats per sampled token (results.sampled_entropy); None if not recorded


def with_sampled_logprobs(trial: TrialResult, results_dir: Path | None) -> TrialResult:
    """``trial``, its sampled-token record filled from its saved trajectory when the results predate the field.

    Returns the trial unchanged when it has the record, or when there is no readable trajectory to fill it from.
    """
    if trial.sampled_logprob_sum is not None or results_dir is None or not trial.trajectory_path:
        return trial
    path = results_dir / trial.trajectory_path
    if not path.is_file():
        return trial
    traj = Trajectory.load(path)
    return trial.model_copy(update={"n_sampled_tokens": traj.n_sampled_tokens, "sampled_logprob_sum": traj.sampled_logprob_sum})


def task_stats(results: EvalResults, results_dir: Path | None = None) -> dict[str, TaskStats]:
    """task id → its stats, in first-seen order; tasks whose every trial was lost are left out.

    ``results_dir`` (the directory of results.json) lets results written before the sampled-token record
    existed get their entropy from the saved trajectories.
    """
    by_task: dict[str, list[TrialResult]] = {}
    for t in results.trials:
        by_task.setdefault(t.task_id, [])
        if not t.lost:
            by_task[t.task_id].append(with_sampled_logprobs(t, results_dir))
    return {
        tid: TaskStats(sum(t.solved for t in ts) / len(ts), sum(t.reward for t in ts) / len(ts),
                       sum(t.n_output_tokens for t in ts), sum(t.solved for t in ts), sampled_entropy(ts))
        for tid, ts in by_task.items() if ts
    }


def bootstrap_mean_ci(values: Sequence[float], *, n_resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> Interval:
    """Mean of ``values`` (one per task) and its percentile bootstrap interval over resampled tasks.

    Shape: values (N,) → N tasks drawn with replacement ``n_resamples`` times from ``default_rng(seed)``.

    Raises:
        ValueError: no values, ``n_resamples < 1`` or ``level`` outside (0, 1).
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("bootstrap needs at least one task value")
    if n_resamples < 1:
        raise ValueError(f"n_resamples = {n_resamples}: must be >= 1 (--resamples; 10000 is the default)")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level = {level}: must be in (0, 1), e.g. 0.95")
    rng = np.random.default_rng(seed)
    rows = max(1, _MAX_DRAW_CELLS // x.size)
    means = np.concatenate([
        x[rng.integers(0, x.size, size=(min(rows, n_resamples - i), x.size))].mean(axis=1)
        for i in range(0, n_resamples, rows)
    ])
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    mean = float(x.mean())
    # float rounding in the quantile must not put the estimate outside a zero-width interval
    return Interval(mean=mean, low=min(float(low), mean), high=max(float(high), mean))


def paired_difference_ci(baseline: Sequence[float], other: Sequence[float], **kwargs) -> Interval:
    """Mean of ``other - baseline`` over the same tasks and its paired bootstrap interval (tasks drawn jointly).

    Shape: baseline (N,), other (N,), aligned by task. Keyword arguments as ``bootstrap_mean_ci``.

    Raises:
        ValueError: the two are not the same length, or as ``bootstrap_mean_ci``.
    """
    if len(baseline) != len(other):
        raise ValueError(f"paired difference needs aligned per-task values; got {len(baseline)} and {len(other)}")
    return bootstrap_mean_ci(np.asarray(other, dtype=np.float64) - np.asarray(baseline, dtype=np.float64), **kwargs)


def load_results(paths: Sequence[str | Path]) -> list[tuple[Path, EvalResults]]:
    """``(file, results)`` for each results.json or eval directory (holding results.json).

    Raises:
        ValueError: no paths, or a file that is missing / not an eval results.json (the message names it).
    """
    if not paths:
        raise ValueError("no results: pass `fireflash eval` results.json files or their directories")
    files = [Path(p) / "results.json" if Path(p).is_dir() else Path(p) for p in paths]
    return [(f, EvalResults.load(f)) for f in files]


def _labels(loaded: Sequence[tuple[str | Path, EvalResults]], labels: Sequence[str] | None) -> list[str]:
    if labels:
        if len(labels) != len(loaded):
            raise ValueError(f"{len(labels)} --label for {len(loaded)} results: pass one --label per RESULTS path, in order")
        return list(labels)
    files = [Path(f) for f, _ in loaded]
    names = [(f.parent.name if f.name == "results.json" else f.stem) or r.model for f, (_, r) in zip(files, loaded)]
    return [n if names.count(n) == 1 else f"{n}#{i + 1}" for i, n in enumerate(names)]


def compare_results(
    loaded: Sequence[tuple[str | Path, EvalResults]],
    labels: Sequence[str] | None = None,
    *,
    n_resamples: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> Comparison:
    """Pass@1 with intervals for each result and its paired change against the first, on the common tasks.

    Raises:
        ValueError: no results, label count mismatch, or no task graded in every result (the message names the files).
    """
    if not loaded:
        raise ValueError("no results: pass `fireflash eval` results.json files or their directories")
    names = _labels(loaded, labels)
    per_task = [task_stats(r, Path(f).parent) for f, r in loaded]
    common = [tid for tid in per_task[0] if all(tid in p for p in per_task[1:])]
    if not common:
        raise ValueError(f"no task has a graded trial in every result ({', '.join(str(f) for f, _ in loaded)}); "
                         "evaluate the same task set, e.g. bundled:heldout")
    base = [per_task[0][tid].pass_at_1 for tid in common]
    base_entropy = [per_task[0][tid].sampled_entropy for tid in common]
    ci = {"n_resamples": n_resamples, "seed": seed, "level": level}
    rows = []
    for i, ((path, res), name, tasks) in enumerate(zip(loaded, names, per_task)):
        stats = [tasks[tid] for tid in common]
        p1 = [s.pass_at_1 for s in stats]
        delta = None if i == 0 else paired_difference_ci(base, p1, **ci)
        entropy = [s.sampled_entropy for s in stats]
        has_entropy = None not in entropy
        entropy_delta = (paired_difference_ci(base_entropy, entropy, **ci)
                         if i > 0 and has_entropy and None not in base_entropy else None)
        solves = sum(s.n_solved for s in stats)
        rows.append(ComparedResult(
            label=name, source=str(path), model=res.model, n_tasks=len(common),
            n_tasks_dropped=len({t.task_id for t in res.trials}) - len(common), trials_per_task=res.trials_per_task,
            pass_at_1=bootstrap_mean_ci(p1, **ci),
            delta=delta, significant=None if delta is None else delta.excludes_zero,
            mean_reward=float(np.mean([s.mean_reward for s in stats])), n_solved=solves,
            output_tokens_per_solve=sum(s.n_output_tokens for s in stats) / solves if solves else None,
            n_lost=sum(t.lost for t in res.trials),
            sampled_entropy=bootstrap_mean_ci(entropy, **ci) if has_entropy else None, entropy_delta=entropy_delta,
        ))
    return Comparison(task_ids=common, n_resamples=n_resamples, seed=seed, level=level, results=rows)


def _pct(iv: Interval, signed: bool = False) -> tuple[str, str]:
    spec = "+.1f" if signed else ".1f"
    return f"{100 * iv.mean:{spec}}", f"[{100 * iv.low:{spec}}, {100 * iv.high:{spec}}]"


TABLE_HEAD = ["label", "model", "tasks", "trials/task", "Pass@1 %", "CI", "Δ vs base (pts)", "Δ CI", "significant",
              "mean reward", "out tok / solve", "entropy (nats/tok)", "Δ entropy", "Δ entropy CI", "lost trials"]


def table_rows(comparison: Comparison) -> list[list[str]]:
    """One row of strings per result, columns as ``TABLE_HEAD`` (for Markdown and the terminal)."""
    rows = []
    for r in comparison.results:
        delta = _pct(r.delta, signed=True) if r.delta else ("baseline", "")
        sig = "" if r.significant is None else ("yes" if r.significant else "no")
        tok = "–" if r.output_tokens_per_solve is None else f"{r.output_tokens_per_solve:.0f}"
        ent = "–" if r.sampled_entropy is None else f"{r.sampled_entropy.mean:.3f}"
        d = r.entropy_delta
        ent_delta = ("–", "") if d is None else (f"{d.mean:+.3f}", f"[{d.low:+.3f}, {d.high:+.3f}]")
        rows.append([r.label, r.model, str(r.n_tasks), str(r.trials_per_task), *_pct(r.pass_at_1), *delta, sig,
                     f"{r.mean_reward:.3f}", tok, ent, *ent_delta, str(r.n_lost)])
    return rows


def plot_compare(comparison: Comparison, path: Path) -> Path:
    """Bar per result: Pass@1 (%) with its bootstrap interval as the error bar, the change against the baseline above."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = comparison.results
    means = np.array([100 * r.pass_at_1.mean for r in res])
    err = np.array([[100 * (r.pass_at_1.mean - r.pass_at_1.low) for r in res],
                    [100 * (r.pass_at_1.high - r.pass_at_1.mean) for r in res]])
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(res) + 2), 4.5), dpi=120)
    colors = ["tab:gray"] + ["tab:green" if r.significant else "tab:blue" for r in res[1:]]
    ax.bar(range(len(res)), means, yerr=err, capsize=6, color=colors, edgecolor="black", linewidth=0.5)
    for i, r in enumerate(res):
        note = f"{means[i]:.1f}%" + (f"\nΔ {100 * r.delta.mean:+.1f} [{100 * r.delta.low:+.1f}, {100 * r.delta.high:+.1f}]"
                                     if r.delta else "\nbaseline")
        ax.annotate(note, (i, means[i] + err[1, i]), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
    ax.set_xticks(range(len(res)), [r.label for r in res])
    top = float((means + err[1]).max())
    ax.set_ylim(0, max(10.0, top) + 20)  # headroom above 100% keeps the notes off the title
    ax.set_yticks([t for t in range(0, 101, 20) if t <= top + 20])
    ax.set_ylabel("Pass@1 (%)")
    ax.set_title(f"Pass@1 on {len(comparison.task_ids)} common tasks, {comparison.level:.0%} bootstrap CI", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def run_curves(run_dirs: Sequence[str | Path]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """panel name → run name → (steps, values): ``RL_PANELS`` of RL runs, ``SFT_PANELS`` of SFT runs (``accuracy`` logged).

    Raises:
        ValueError: a run directory without a readable metrics.jsonl (the message names it), or no run
            logged any curve metric.
    """
    dirs = [Path(d) for d in run_dirs]
    names = [d.name if [e.name for e in dirs].count(d.name) == 1 else str(d) for d in dirs]
    curves: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for d, name in zip(dirs, names):
        try:
            rows = read_metrics(d)
        except MetricsError as e:  # names the file and line already
            raise ValueError(str(e)) from None
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{d / 'metrics.jsonl'}: not readable ({e})") from None
        if not rows:
            raise ValueError(f"{d / 'metrics.jsonl'}: missing or empty; `fireflash train` / `fireflash sft` write it")
        is_sft = any("accuracy" in r for r in rows) and not any("rollout/reward_mean" in r for r in rows)
        for panel in SFT_PANELS if is_sft else RL_PANELS:
            for series in panel_series(rows, panel).values():  # one key per curve panel
                curves.setdefault(panel.name, {})[name] = series
    if not curves:
        raise ValueError(f"runs {', '.join(map(str, dirs))} logged none of "
                         + ", ".join(k for p in CURVE_PANELS for k in p.keys))
    return curves


def plot_curves(curves: dict[str, dict[str, tuple[list[int], list[float]]]], path: Path) -> Path:
    """One panel per logged curve metric (``run_curves``' output), one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in CURVE_PANELS if p.name in curves]
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.8 * cols, 3.4 * nrows), dpi=100, squeeze=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    for ax, panel in zip(axes.flat, panels):
        for run, (steps, values) in curves[panel.name].items():
            w = curve_window(len(steps))
            if w < 3:
                ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, linewidth=1.4, label=run)
                continue
            raw = ax.plot(steps, values, linewidth=0.8, alpha=0.35)[0]
            x, y = np.asarray(steps), np.asarray(values, dtype=np.float64)
            x, y = x[np.isfinite(y)], y[np.isfinite(y)]
            if len(y) >= w:
                ax.plot(x[w - 1:], np.convolve(y, np.ones(w) / w, mode="valid"), linewidth=1.8, color=raw.get_color(),
                        label=f"{run} (mean of {w} steps)")
        style_step_axes(ax, panel)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def curve_window(n_steps: int) -> int:
    """Steps averaged at each end of a curve and in its smoothed line: a fifth of the run, 1 to 10 steps.

    Per-step RL metrics are noisy (each step sees a few groups of different tasks), so single first / last
    values mislead; short runs keep their raw values.
    """
    return min(10, max(1, n_steps // 5))


def curve_ends(values: Sequence[float]) -> tuple[int, float, float] | None:
    """(window, mean of the first ``window`` finite values, mean of the last); None if none is finite."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    w = curve_window(len(finite))
    return w, float(np.mean(finite[:w])), float(np.mean(finite[-w:]))


def compare_markdown(comparison: Comparison, curves: dict | None = None) -> str:
    """``compare.md``: the table, dropped tasks, method, and first / last value of each run curve."""
    c = comparison
    lines = ["# Pass@1 comparison", "",
             (f"{len(c.task_ids)} tasks in every result; Pass@1 per task = solved / graded trials (lost trials excluded). "
              f"{c.level:.0%} intervals: percentile bootstrap over tasks, {c.n_resamples} resamples, seed {c.seed}; "
              f"Δ is paired against **{c.results[0].label}** on the same task draws, significant when its interval excludes 0. "
              "Entropy: nats per token the policy sampled in these trials (-mean log q; its entropy at temperature 1), "
              "mean over tasks, Δ paired the same way."),
             "", "| " + " | ".join(TABLE_HEAD) + " |", "|" + "---|" * len(TABLE_HEAD),
             *["| " + " | ".join(row) + " |" for row in table_rows(c)], ""]
    dropped = [f"{r.label}: {r.n_tasks_dropped}" for r in c.results if r.n_tasks_dropped]
    lines += [f"Tasks dropped (not graded in every result): {', '.join(dropped)}." if dropped else "No task dropped.", "",
              "![compare](compare.png)", ""]
    if curves:
        lines += ["## Training curves", "", "![curves](curves.png)", "",
                  "First / last: means over the first and last *averaged* steps (a fifth of the run, at most 10).", "",
                  "| metric | run | steps | averaged | first | last |", "|---|---|---|---|---|---|"]
        for panel in CURVE_PANELS:
            for run, (steps, values) in curves.get(panel.name, {}).items():
                ends = curve_ends(values)
                cells = ("–", "–", "–") if ends is None else (str(ends[0]), f"{ends[1]:.4g}", f"{ends[2]:.4g}")
                lines.append(f"| {panel.keys[0]} | {run} | {len(steps)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def write_compare(
    results_paths: Sequence[str | Path],
    out_dir: str | Path,
    *,
    labels: Sequence[str] | None = None,
    run_dirs: Sequence[str | Path] = (),
    n_resamples: int = 10_000,
    seed: int = 0,
) -> Comparison:
    """Read the results (and runs), write ``compare.png``, ``compare.md``, ``compare.json`` and, with runs, ``curves.png``.

    Raises:
        ValueError: as ``load_results``, ``compare_results`` and ``run_curves``; nothing is written then.
    """
    out = Path(out_dir)
    comparison = compare_results(load_results(results_paths), labels, n_resamples=n_resamples, seed=seed)
    curves = run_curves(run_dirs) if run_dirs else None
    out.mkdir(parents=True, exist_ok=True)
    plot_compare(comparison, out / "compare.png")
    if curves is not None:
        plot_curves(curves, out / "curves.png")
    (out / "compare.md").write_text(compare_markdown(comparison, curves))
    (out / "compare.json").write_text(comparison.model_dump_json(indent=1))
    return comparison
