"""Replay oracle plans through real sandboxes and graders; keep the passing trajectories (issue #10).

One code path with training and evaluation: ``run_trials`` → ``scored_attempt`` → ``run_attempt``, with a
``ScriptedEngine`` whose script is the oracle plan. A plan that fails its task's grader (a variant that
does not fit the harness limits, e.g. a turn over ``max_new_tokens_per_turn``) is dropped and counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.config import HarnessConfig
from fireflash.harness.rendering import ChatRenderer
from fireflash.protocols import Grader, SandboxBackend, Task, Trajectory
from fireflash.rollout.attempts import AttemptOutcome
from fireflash.rollout.trials import check_unique_ids, run_trials
from fireflash.sft.oracle import OraclePlan, OracleScript, describe, index_plans, plans_for


@dataclass
class OracleSet:
    """The kept oracle trajectories and what was dropped, per plan."""

    trajectories: list[Trajectory] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_plans(self) -> int:
        return len(self.trajectories) + len(self.dropped)


async def collect_oracle(
    tasks: Sequence[Task],
    variants: Sequence[str],
    *,
    backend: SandboxBackend,
    tokenizer: Any,
    harness: HarnessConfig,
    grader_for: Callable[[Task], Grader],
    max_concurrent: int,
    max_retries: int = 1,
    on_outcome: Callable[[Task, int, AttemptOutcome], None] | None = None,
) -> OracleSet:
    """Replay every (task, reference script, variant) plan and grade it.

    Returns:
        ``OracleSet``: trajectories that scored ``solved`` (plan recorded in ``metadata['oracle']``), and
        one record per dropped plan with its reason (lost to infrastructure, or not passed with reward).

    Raises:
        fireflash.sft.oracle.OracleError: a task has no reference solution, or the assistant prefix cannot
            start a tool call.
        ValueError: two tasks share an id, before anything is replayed (the replays run in batches by
            solution count, and a duplicate would otherwise surface only after the first batch).
    """
    check_unique_ids(tasks)
    plans = plans_for(tasks, variants)
    by_task = index_plans(plans)
    engine = ScriptedEngine(tokenizer, OracleScript(by_task, ChatRenderer(tokenizer), harness.assistant_prefix))
    result = OracleSet()
    # run_trials runs the same number of trials per task; tasks differ in how many reference scripts they have
    for count in sorted({len(v) for v in by_task.values()}):
        subset = [t for t in tasks if len(by_task.get(t.id, [])) == count]
        outcomes = await run_trials(
            subset, count, backend=backend, engine=engine, tokenizer=tokenizer, harness=harness,
            grader_for=grader_for, max_concurrent=max_concurrent, max_retries=max_retries,
            attempt_prefix="oracle", on_outcome=on_outcome,
        )
        for task in subset:
            for plan, outcome in zip(by_task[task.id], outcomes[task.id]):
                _keep_or_drop(plan, outcome, result)
    return result


def _keep_or_drop(plan: OraclePlan, outcome: AttemptOutcome, result: OracleSet) -> None:
    record = describe(plan)
    if outcome.lost:
        reason = outcome.errors[-1].message if outcome.errors else "lost"
        result.dropped.append(record | {"reason": f"infrastructure: {reason[:200]}"})
    elif not outcome.score.solved:
        t = outcome.trajectory
        result.dropped.append(record | {"reason": f"not passed (reward {outcome.score.reward:.2f}, {t.finish_reason}, "
                                                  f"{t.n_turns} turns)"})
    else:
        traj = outcome.trajectory.model_copy(update={"metadata": outcome.trajectory.metadata | {"oracle": record}})
        result.trajectories.append(traj)


def save_oracle(result: OracleSet, out_dir: Path) -> Path:
    """Write the kept trajectories (one JSON each) and ``dropped.json`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for t in result.trajectories:
        o = t.metadata["oracle"]
        t.save(out_dir / f"{o['task_id']}.{o['solution'].removesuffix('.sh')}.{o['variant']}.json")
    (out_dir / "dropped.json").write_text(json.dumps(result.dropped, indent=1))
    return out_dir


def load_oracle(out_dir: Path) -> list[Trajectory]:
    """The trajectories ``save_oracle`` wrote, in a stable (sorted) order."""
    return [Trajectory.load(p) for p in sorted(Path(out_dir).glob("*.json")) if p.name != "dropped.json"]
