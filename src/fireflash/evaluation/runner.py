"""`fireflash eval`: N trials per task in the training harness; Pass@k, tokens, cost, failures (RECIPE.md §6).

    results = await evaluate(tasks, backend=..., engine=..., tokenizer=..., harness=cfg.harness,
                             grader_for=..., trials_per_task=5, ks=[1, 5], prices=prices,
                             max_concurrent=8, max_retries=2, out_dir=Path("runs/eval"), model="smollm2-135m")

Writes into ``out_dir``: ``results.json`` (``EvalResults``), ``results.md`` (tables) and
``trajectories/<task id>/t<trial>.json`` (every graded trial, for inspection). Trials run through
``run_trials`` → ``scored_attempt``: the same code path, harness and sandbox as training.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fireflash.evaluation.cost import TokenPrices, trial_cost_usd
from fireflash.evaluation.results import EvalResults, TrialResult, markdown_tables, summarize
from fireflash.harness.config import HarnessConfig
from fireflash.protocols import Engine, Grader, SandboxBackend, Task
from fireflash.rollout.attempts import AttemptOutcome
from fireflash.rollout.trials import run_trials


def task_category(task: Task) -> str:
    """The task's ``metadata['category']`` (Harbor's task.toml), or 'uncategorized'."""
    return str(task.metadata.get("category") or "uncategorized")


def failure_reason(outcome: AttemptOutcome) -> str:
    """Why a trial did not solve its task ('' if it did): the infrastructure error, the grader's reason,
    or how the attempt ended ('unsolved:<finish reason>')."""
    if outcome.lost:
        last = outcome.errors[-1] if outcome.errors else None
        kind = last.type if last else "unknown"
        if kind == "AttemptFailed" and ": " in last.message:  # "<harness error type>: <message>": name the real cause
            kind = last.message.split(": ", 1)[0]
        return f"infrastructure:{kind}"
    if outcome.score.solved:
        return ""
    if outcome.score.reason:
        return outcome.score.reason
    return f"unsolved:{outcome.trajectory.finish_reason or outcome.trajectory.status.value}"


def trial_result(task: Task, index: int, outcome: AttemptOutcome, prices: TokenPrices | None, trajectory_path: str | None) -> TrialResult:
    """One outcome as a ``TrialResult`` (cost from its token counts when ``prices`` is given)."""
    base = {
        "task_id": task.id, "trial": index, "attempt_id": outcome.attempt_id, "category": task_category(task), "lost": outcome.lost,
        "failure": failure_reason(outcome), "wall_sec": outcome.duration_sec, "tries": outcome.tries, "errors": outcome.errors,
    }
    if outcome.lost:
        return TrialResult(**base)
    traj, counts = outcome.trajectory, outcome.trajectory.token_counts
    return TrialResult(
        **base, solved=outcome.score.solved, reward=outcome.score.reward, status=traj.status.value,
        finish_reason=traj.finish_reason, n_turns=traj.n_turns, n_input_tokens=counts.n_input_tokens,
        n_cached_input_tokens=counts.n_cached_input_tokens, n_output_tokens=counts.n_output_tokens,
        n_sampled_tokens=traj.n_sampled_tokens, sampled_logprob_sum=traj.sampled_logprob_sum,
        cost_usd=trial_cost_usd(counts, prices) if prices is not None else None, trajectory_path=trajectory_path,
        grader_log="" if outcome.score.solved else outcome.score.log,
    )


async def evaluate(
    tasks: Sequence[Task],
    *,
    backend: SandboxBackend,
    engine: Engine,
    tokenizer: Any,
    harness: HarnessConfig,
    grader_for: Callable[[Task], Grader],
    trials_per_task: int,
    ks: Sequence[int],
    prices: TokenPrices | None,
    max_concurrent: int,
    max_retries: int,
    out_dir: Path,
    model: str,
    setting: str = "",
    task_set: str = "",
    engine_settings: dict | None = None,
    on_trial: Callable[[TrialResult], None] | None = None,
) -> EvalResults:
    """Evaluate ``model`` on ``tasks``: ``trials_per_task`` scored trials each; save and return the results.

    Args:
        ks: pass@k values, each in [1, trials_per_task].
        prices: per-token prices for cost; None leaves every cost field None.
        task_set: the task specs ``tasks`` were loaded from (e.g. 'bundled:heldout'), recorded so that a
            Pass@1 is never read as one on another task set (``fireflash report pareto``).
        engine_settings: the engine config, recorded in the results.
        on_trial: called after each trial is recorded (progress display).

    Raises:
        ValueError: a k outside [1, trials_per_task], or duplicate task ids.
    """
    bad = [k for k in ks if not 1 <= k <= trials_per_task]
    if bad:
        raise ValueError(f"pass@k values {bad} outside [1, trials_per_task={trials_per_task}]")
    out_dir = Path(out_dir)
    trials: list[TrialResult] = []

    def record(task: Task, index: int, outcome: AttemptOutcome) -> None:
        path = None
        if outcome.trajectory is not None:
            path = f"trajectories/{task.id}/t{index}.json"
            outcome.trajectory.save(out_dir / path)
        trials.append(trial_result(task, index, outcome, prices, path))
        if on_trial is not None:
            on_trial(trials[-1])

    await run_trials(
        tasks, trials_per_task, backend=backend, engine=engine, tokenizer=tokenizer, harness=harness,
        grader_for=grader_for, max_concurrent=max_concurrent, max_retries=max_retries, attempt_prefix="eval",
        on_outcome=record,
    )
    order = {t.id: i for i, t in enumerate(tasks)}
    trials.sort(key=lambda t: (order[t.task_id], t.trial))
    overall, per_task, per_category = summarize(trials, ks)
    results = EvalResults(
        model=model, setting=setting, task_set=task_set, created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        trials_per_task=trials_per_task, ks=list(ks), prices=prices, harness=harness.model_dump(mode="json"),
        engine=engine_settings or {}, overall=overall, tasks=per_task, categories=per_category, trials=trials,
    )
    results.save(out_dir / "results.json")
    (out_dir / "results.md").write_text(markdown_tables(results))
    return results
