"""Run N scored attempts per task with bounded concurrency: the shared loop of probing and evaluation.

Every attempt goes through ``fireflash.rollout.attempts.scored_attempt`` — the unit of work of training —
so probe and eval use the training harness, engine settings and sandbox (RECIPE.md §2, §6: one code
path). Each task's parent sandbox is prepared once, shared by its attempts, and closed as soon as the
task's last attempt ends, so a long task list never holds every parent at once. Attempts are admitted
task by task in list order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from fireflash.harness.config import HarnessConfig
from fireflash.protocols import Engine, Grader, Sandbox, SandboxBackend, Task
from fireflash.rollout.attempts import AttemptOutcome, ParentPool, scored_attempt

OnOutcome = Callable[[Task, int, AttemptOutcome], None]


class _Parents:
    """The shared ``ParentPool``, closing a task's parent once its last trial is done."""

    def __init__(self, backend: SandboxBackend, remaining: dict[str, int]) -> None:
        self.pool = ParentPool(backend)
        self.remaining = dict(remaining)

    async def get(self, task: Task) -> Sandbox:
        return await self.pool.get(task)

    async def release(self, task: Task) -> None:
        self.remaining[task.id] -= 1
        if self.remaining[task.id] == 0:
            await self.pool.close(task)


def check_unique_ids(tasks: Sequence[Task]) -> None:
    """Raises ValueError naming every task id that occurs more than once (two paths to the same task)."""
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"task ids must be unique; duplicated: {dup} (check the task paths for the same task twice)")


async def run_trials(
    tasks: Sequence[Task],
    trials_per_task: int,
    *,
    backend: SandboxBackend,
    engine: Engine,
    tokenizer: Any,
    harness: HarnessConfig,
    grader_for: Callable[[Task], Grader],
    max_concurrent: int,
    max_retries: int,
    attempt_prefix: str,
    on_outcome: OnOutcome | None = None,
) -> dict[str, list[AttemptOutcome]]:
    """``trials_per_task`` scored attempts of every task, at most ``max_concurrent`` at a time.

    Args:
        tasks: tasks with unique ids.
        attempt_prefix: start of every attempt id (``<prefix>/<task id>/t<index>``), e.g. 'eval' or 'probe'.
        on_outcome: called with (task, trial index, outcome) as each attempt finishes (progress, saving).

    Returns:
        task id → its outcomes ordered by trial index; lost attempts are included (``outcome.lost``).

    Raises:
        ValueError: duplicate task ids, ``trials_per_task < 1`` or ``max_concurrent < 1``.
    """
    check_unique_ids(tasks)
    if trials_per_task < 1 or max_concurrent < 1:
        raise ValueError(f"trials_per_task ({trials_per_task}) and max_concurrent ({max_concurrent}) must be >= 1")
    parents = _Parents(backend, {t.id: trials_per_task for t in tasks})
    gate = asyncio.Semaphore(max_concurrent)
    results: dict[str, list[AttemptOutcome | None]] = {t.id: [None] * trials_per_task for t in tasks}

    async def one(task: Task, index: int) -> None:
        async with gate:
            try:
                outcome = await scored_attempt(
                    task, lambda: parents.get(task), engine, tokenizer, harness, grader_for(task),
                    f"{attempt_prefix}/{task.id}/t{index}", max_retries,
                )
            finally:
                await parents.release(task)
        results[task.id][index] = outcome
        if on_outcome is not None:
            on_outcome(task, index, outcome)

    async with asyncio.TaskGroup() as group:
        for task in tasks:
            for index in range(trials_per_task):
                group.create_task(one(task, index))
    return {tid: [o for o in outs if o is not None] for tid, outs in results.items()}
