"""Evaluation results: per-trial records, per-task and per-category aggregates, Markdown tables (RECIPE.md §6).

``EvalResults`` is what ``fireflash eval`` writes to ``results.json`` and what ``fireflash report pareto``
reads back. Lost trials (infrastructure failures after retries) are not the model's fault: they count
in ``n_lost`` and in failure reasons but not in pass rates, rewards, tokens or cost. A task whose graded
trials are fewer than k has no pass@k; averages are over the tasks that have it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean

from pydantic import BaseModel, ConfigDict, Field

from fireflash.evaluation.cost import TokenPrices, cost_per_solve_usd
from fireflash.evaluation.passk import pass_at_k
from fireflash.protocols import SCHEMA_VERSION, ErrorInfo


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrialResult(_Model):
    """One trial of one task."""

    task_id: str
    trial: int = Field(description="Index in [0, trials_per_task).")
    attempt_id: str
    category: str
    lost: bool = Field(description="Lost to infrastructure after every retry; not graded.")
    solved: bool = False
    reward: float = 0.0
    status: str = Field("", description="Trajectory status: completed / truncated / aborted / failed.")
    finish_reason: str = ""
    failure: str = Field("", description="'' if solved, else why not: grader reason, finish reason or infrastructure error.")
    grader_log: str = Field("", description="Tail of the grader's output for unsolved graded trials (for inspection).")
    n_turns: int = 0
    n_input_tokens: int = 0
    n_cached_input_tokens: int = 0
    n_output_tokens: int = 0
    n_sampled_tokens: int | None = Field(None, description="Policy-sampled tokens of the saved trajectory; None in results from before it was recorded.")
    sampled_logprob_sum: float | None = Field(
        None, description="Σ log q of those tokens (nats): -sum / n_sampled_tokens estimates the sampler's entropy per token.")
    wall_sec: float = Field(0.0, description="Seconds of the whole scored attempt, retries included.")
    tries: int = 1
    cost_usd: float | None = Field(None, description="None when no prices were resolved.")
    trajectory_path: str | None = Field(None, description="Saved trajectory JSON, relative to the results directory.")
    errors: list[ErrorInfo] = Field(default_factory=list, description="One per failed try.")


class Aggregate(_Model):
    """Means over graded trials (a task) or over tasks (a category / overall)."""

    n_tasks: int
    n_trials: int
    n_graded: int
    n_solved: int
    n_lost: int
    pass_at_k: dict[str, float | None] = Field(description="'1', '5', ... → mean unbiased pass@k; None if no task has k graded trials.")
    mean_reward: float | None
    mean_n_input_tokens: float | None
    mean_n_cached_input_tokens: float | None
    mean_n_output_tokens: float | None
    mean_turns: float | None
    mean_wall_sec: float | None
    sampled_entropy: float | None = Field(
        None, description="Nats per sampled token, -Σ log q / Σ tokens over graded trials (a task) or the mean over "
        "tasks: the Monte-Carlo entropy of the sampler on its own trajectories, the policy's at temperature 1.")
    cost_per_trial_usd: float | None
    cost_per_solve_usd: float | None
    failure_reasons: dict[str, int] = Field(default_factory=dict)


class TaskResult(Aggregate):
    task_id: str
    category: str


class CategoryResult(Aggregate):
    category: str


class EvalResults(_Model):
    """Everything one ``fireflash eval`` run measured; saved as ``results.json``."""

    schema_version: int = SCHEMA_VERSION
    model: str
    setting: str = ""
    task_set: str = Field(
        "", description="The task specs evaluated, as given on the command line (e.g. 'bundled:heldout'); "
        "'' in results written before it was recorded.")
    created_at: str = Field(description="UTC ISO-8601 time the run finished.")
    trials_per_task: int
    ks: list[int]
    prices: TokenPrices | None = None
    harness: dict = Field(default_factory=dict, description="The harness config every trial ran with.")
    engine: dict = Field(default_factory=dict, description="The engine config every trial ran with.")
    overall: Aggregate
    tasks: list[TaskResult]
    categories: list[CategoryResult]
    trials: list[TrialResult]

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=1))

    @classmethod
    def load(cls, path: Path) -> EvalResults:
        """Raises ValueError naming the file when it is not an eval results JSON of a known schema."""
        try:
            results = cls.model_validate_json(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a readable `fireflash eval` results.json ({e})") from None
        if results.schema_version > SCHEMA_VERSION:
            raise ValueError(f"{path}: schema_version {results.schema_version} is newer than this FireFlash ({SCHEMA_VERSION})")
        return results


def _mean(values: Sequence[float]) -> float | None:
    return fmean(values) if values else None


def sampled_entropy(trials: Sequence[TrialResult]) -> float | None:
    """-Σ log q / Σ sampled tokens (nats per token) over ``trials``; None if a trial lacks the record or none sampled.

    A token-weighted Monte-Carlo estimate of the sampler's entropy on the states its own trials reached
    (E_{y~q}[-log q(y)] = H(q)); at temperature 1 it is the policy entropy RECIPE.md §5 watches.
    """
    if any(t.sampled_logprob_sum is None or t.n_sampled_tokens is None for t in trials):
        return None
    n = sum(t.n_sampled_tokens for t in trials)
    return -sum(t.sampled_logprob_sum for t in trials) / n if n else None


def aggregate_task(trials: Sequence[TrialResult], ks: Sequence[int]) -> dict:
    """Aggregate fields of one task's trials (pass@k from graded trials only)."""
    graded = [t for t in trials if not t.lost]
    solved = sum(t.solved for t in graded)
    costs = [t.cost_usd for t in graded if t.cost_usd is not None]
    priced = len(costs) == len(graded) and graded
    return {
        "n_tasks": 1, "n_trials": len(trials), "n_graded": len(graded), "n_solved": solved, "n_lost": len(trials) - len(graded),
        "pass_at_k": {str(k): pass_at_k(len(graded), solved, k) if len(graded) >= k else None for k in ks},
        "mean_reward": _mean([t.reward for t in graded]),
        "mean_n_input_tokens": _mean([t.n_input_tokens for t in graded]),
        "mean_n_cached_input_tokens": _mean([t.n_cached_input_tokens for t in graded]),
        "mean_n_output_tokens": _mean([t.n_output_tokens for t in graded]),
        "mean_turns": _mean([t.n_turns for t in graded]),
        "mean_wall_sec": _mean([t.wall_sec for t in graded]),
        "sampled_entropy": sampled_entropy(graded),
        "cost_per_trial_usd": _mean(costs) if priced else None,
        "cost_per_solve_usd": cost_per_solve_usd(sum(costs), solved) if priced else None,
        "failure_reasons": dict(Counter(t.failure for t in trials if t.failure)),
    }


def aggregate_tasks(tasks: Sequence[TaskResult], trials: Sequence[TrialResult], ks: Sequence[int]) -> dict:
    """Aggregate fields over tasks: pass@k and means are means of per-task values (each task weighs the same)."""
    graded = [t for t in trials if not t.lost]
    costs = [t.cost_usd for t in graded if t.cost_usd is not None]
    priced = len(costs) == len(graded) and graded
    reasons: Counter[str] = Counter()
    for task in tasks:
        reasons.update(task.failure_reasons)

    def over_tasks(field: str) -> float | None:
        return _mean([v for t in tasks if (v := getattr(t, field)) is not None])

    return {
        "n_tasks": len(tasks), "n_trials": len(trials), "n_graded": len(graded), "n_solved": sum(t.n_solved for t in tasks),
        "n_lost": len(trials) - len(graded),
        "pass_at_k": {str(k): _mean([v for t in tasks if (v := t.pass_at_k[str(k)]) is not None]) for k in ks},
        "mean_reward": over_tasks("mean_reward"), "mean_n_input_tokens": over_tasks("mean_n_input_tokens"),
        "mean_n_cached_input_tokens": over_tasks("mean_n_cached_input_tokens"),
        "mean_n_output_tokens": over_tasks("mean_n_output_tokens"), "mean_turns": over_tasks("mean_turns"),
        "mean_wall_sec": over_tasks("mean_wall_sec"), "sampled_entropy": over_tasks("sampled_entropy"),
        "cost_per_trial_usd": _mean(costs) if priced else None,
        "cost_per_solve_usd": cost_per_solve_usd(sum(costs), sum(t.n_solved for t in tasks)) if priced else None,
        "failure_reasons": dict(reasons.most_common()),
    }


def summarize(trials: Sequence[TrialResult], ks: Sequence[int]) -> tuple[Aggregate, list[TaskResult], list[CategoryResult]]:
    """Overall, per-task (in first-seen order) and per-category (sorted) aggregates of ``trials``."""
    by_task: dict[str, list[TrialResult]] = {}
    for t in trials:
        by_task.setdefault(t.task_id, []).append(t)
    tasks = [TaskResult(task_id=tid, category=ts[0].category, **aggregate_task(ts, ks)) for tid, ts in by_task.items()]
    categories = []
    for cat in sorted({t.category for t in tasks}):
        members = [t for t in tasks if t.category == cat]
        cat_trials = [t for t in trials if t.category == cat]
        categories.append(CategoryResult(category=cat, **aggregate_tasks(members, cat_trials, ks)))
    return Aggregate(**aggregate_tasks(tasks, trials, ks)), tasks, categories


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown_tables(results: EvalResults) -> str:
    """The results as Markdown: overall, per category, per task, failure reasons."""
    ks = results.ks
    head = ["", "tasks", "graded", "lost"] + [f"pass@{k}" for k in ks] + [
        "reward", "input tok", "cached tok", "output tok", "turns", "entropy", "wall s", "$/trial", "$/solve"]

    def row(name: str, a: Aggregate) -> str:
        cells = [name, str(a.n_tasks), str(a.n_graded), str(a.n_lost)]
        cells += [_fmt(a.pass_at_k[str(k)], ".1%") for k in ks]
        cells += [_fmt(a.mean_reward, ".3f"), _fmt(a.mean_n_input_tokens, ".0f"), _fmt(a.mean_n_cached_input_tokens, ".0f"),
                  _fmt(a.mean_n_output_tokens, ".0f"), _fmt(a.mean_turns, ".1f"),
                  _fmt(a.sampled_entropy, ".3f"), _fmt(a.mean_wall_sec, ".1f"),
                  _fmt(a.cost_per_trial_usd, ".4f"), _fmt(a.cost_per_solve_usd, ".4f")]
        return "| " + " | ".join(cells) + " |"

    def table(title: str, rows: list[str]) -> list[str]:
        return [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows, ""]

    price = results.prices
    lines = [
        f"# Evaluation: {results.model}" + (f" ({results.setting})" if results.setting else ""), "",
        f"{results.trials_per_task} trials per task, {results.overall.n_tasks} tasks"
        + (f" from {results.task_set}" if results.task_set else "") + f", finished {results.created_at}. "
        + (f"Prices (USD per million tokens, {price.source}): input {price.input_usd_per_mtok}, cached input "
           f"{price.cached_input_usd_per_mtok}, output {price.output_usd_per_mtok}." if price else "No prices: cost not computed.")
        + " Entropy: nats per sampled token, -mean log q of the tokens the policy sampled (its entropy at temperature 1).",
        "",
    ]
    lines += table("Overall", [row("all", results.overall)])
    lines += table("Per category", [row(c.category, c) for c in results.categories])
    lines += table("Per task", [row(t.task_id, t) for t in results.tasks])
    lines += ["## Failure reasons", "", "| reason | trials |", "|---|---|"]
    lines += [f"| {r} | {n} |" for r, n in results.overall.failure_reasons.items()] or ["| (none) | 0 |"]
    return "\n".join(lines) + "\n"
