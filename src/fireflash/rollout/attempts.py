"""One scored attempt, with retries: the unit of work of training, probing and evaluation alike.

fork the task's parent → run the harness → grade a fork of the final state → close both. An
infrastructure failure (sandbox, engine or grader error, or a trajectory with status FAILED) costs
that try; it is retried up to ``max_retries`` times and then reported as lost, never raised, so one
broken attempt never stops a run (RECIPE.md §1: infrastructure failures cost groups, not runs). A trajectory
with status ABORTED (stopped from outside: the engine aborted its request in a weight sync or a shutdown)
costs a try the same way and is never graded: the model did not end it, so its reward (0, or a pass when the
tool calls before the abort happened to solve the task) would train on an ending the model never chose.
Aborted tries are counted apart (``AttemptOutcome.aborted_tries``, ``rollout/aborted_tries``).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fireflash.harness.agent import run_attempt
from fireflash.harness.config import HarnessConfig
from fireflash.protocols import (
    Engine,
    ErrorInfo,
    Grader,
    Sandbox,
    SandboxBackend,
    Score,
    Status,
    Task,
    Trajectory,
)

ParentGetter = Callable[[], Awaitable[Sandbox]]


@dataclass
class AttemptOutcome:
    """The result of ``scored_attempt``: a graded trajectory, or ``lost`` after every try failed."""

    task_id: str
    attempt_id: str
    trajectory: Trajectory | None
    score: Score | None
    tries: int
    errors: list[ErrorInfo] = field(default_factory=list)
    duration_sec: float = 0.0
    # trajectories of the tries the harness ended FAILED or ABORTED, oldest first: kept for inspection, never
    # trained on
    failed_trajectories: list[Trajectory] = field(default_factory=list)

    @property
    def lost(self) -> bool:
        return self.trajectory is None or self.score is None

    @property
    def aborted_tries(self) -> int:
        """Tries stopped from outside (``AttemptAborted``), counted from ``errors``: a driver that retries on
        its own (the Ray backend with engine servers) merges its tries' errors, so the count survives it."""
        return sum(e.type == AttemptAborted.__name__ for e in self.errors)


class ParentPool:
    """Each task's parent sandbox, prepared once and shared by the concurrent first attempts at it.

    A prepare that fails is forgotten, so the next try builds the parent again.
    """

    def __init__(self, backend: SandboxBackend) -> None:
        self.backend = backend
        self._futures: dict[str, asyncio.Future[Sandbox]] = {}

    async def get(self, task: Task) -> Sandbox:
        if task.id not in self._futures:
            self._futures[task.id] = asyncio.ensure_future(self.backend.prepare(task.environment, task.id))
        try:
            return await asyncio.shield(self._futures[task.id])
        except asyncio.CancelledError:
            raise
        except Exception:
            self._futures.pop(task.id, None)
            raise

    async def close(self, task: Task) -> None:
        """Close ``task``'s parent if it was prepared (its attempts must be finished)."""
        future = self._futures.pop(task.id, None)
        if future is not None and future.done() and not future.cancelled() and future.exception() is None:
            await future.result().close()


def error_info(e: BaseException) -> ErrorInfo:
    """An exception as structured data for results and logs (Harbor's exception info)."""
    return ErrorInfo(type=type(e).__name__, message=str(e)[:2000], traceback=traceback.format_exc()[-4000:])


async def _try_once(
    task: Task, parent: ParentGetter, engine: Engine, tokenizer: Any, harness: HarnessConfig, grader: Grader,
    attempt_id: str, margin_sec: float,
) -> tuple[Trajectory, Score]:
    sandbox = await (await parent()).fork()
    try:
        # the harness and the grader enforce these limits themselves; the margin only catches a stage that
        # hangs. asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that arrives as
        # the result lands, and a worker cancelled at the end of a run would then never stop.
        async with asyncio.timeout(task.limits.agent_timeout_sec + margin_sec):
            trajectory = await run_attempt(task, sandbox, engine, tokenizer, harness, attempt_id)
        if trajectory.status is Status.FAILED:
            err = trajectory.error
            message = f"{err.type}: {err.message}" if err else "harness reported an infrastructure failure"
            raise AttemptFailed(message, trajectory)
        if trajectory.status is Status.ABORTED:
            raise AttemptAborted(f"stopped from outside ({trajectory.finish_reason}) after {trajectory.n_turns} turns",
                                 trajectory)
        async with asyncio.timeout(task.limits.verifier_timeout_sec + margin_sec):
            score = await grader.grade(task, sandbox)
        return trajectory, score
    finally:
        await sandbox.close()


class AttemptFailed(RuntimeError):
    """The harness finished with status FAILED (its sandbox or engine broke); carries that trajectory.

    ``trajectory`` has a default because unpickling calls ``AttemptFailed(message)`` and restores it after.
    """

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class AttemptAborted(RuntimeError):
    """The harness finished with status ABORTED (the engine aborted a request: a weight sync or a shutdown);
    carries that trajectory. Not graded: the try is retried like an infrastructure failure."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


async def scored_attempt(
    task: Task,
    parent: ParentGetter,
    engine: Engine,
    tokenizer: Any,
    harness: HarnessConfig,
    grader: Grader,
    attempt_id: str,
    max_retries: int,
    hang_margin_sec: float = 60.0,
) -> AttemptOutcome:
    """Run and grade one attempt in a fresh fork of ``parent``; retry infrastructure failures and aborted tries.

    Args:
        task: the task.
        parent: returns the task's prepared parent sandbox (``SandboxBackend.prepare``); called on every
            try, so a parent that failed to build is rebuilt by the next try.
        max_retries: extra tries after the first (0 = one try).
        hang_margin_sec: seconds past the task's agent / verifier limits after which a stage that did
            not enforce its own limit is cancelled and the try counts as failed.

    Returns:
        ``AttemptOutcome`` with the trajectory and score, or ``lost`` with every try's error; either way
        with the trajectories of the tries the harness ended FAILED or ABORTED (never graded). Cancellation
        propagates (the sandbox is closed first).
    """
    start = time.perf_counter()
    errors: list[ErrorInfo] = []
    failed: list[Trajectory] = []
    for tries in range(1, max_retries + 2):
        try:
            trajectory, score = await _try_once(
                task, parent, engine, tokenizer, harness, grader, f"{attempt_id}#{tries}", hang_margin_sec
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # any stage may fail; the attempt, not the run, pays for it
            errors.append(error_info(e))
            if isinstance(e, (AttemptFailed, AttemptAborted)) and e.trajectory is not None:
                failed.append(e.trajectory)
            continue
        return AttemptOutcome(task.id, attempt_id, trajectory, score, tries, errors, time.perf_counter() - start,
                              failed)
    return AttemptOutcome(task.id, attempt_id, None, None, max_retries + 1, errors, time.perf_counter() - start,
                          failed)
