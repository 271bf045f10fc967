"""The fully asynchronous RL loop on one machine: rollout workers and the trainer never wait for each other.

    workers (max_inflight_attempts asyncio tasks)          trainer (a thread)
      slot ← scheduler; fork parent; harness; grade          take groups_per_step groups from the queue
      group complete → advantages → queue  ──────────────►   train_step (stale turns masked, RECIPE.md §1)
      next turns sample with the newest weights  ◄────────   engine.update_weights(new weights, version + 1)

Rollout and training share the cores: each of the two roles (the engine's decode thread and the trainer
thread) sets its own torch thread budget inside its thread, as torch keeps one per thread
(``runtime.threads_per_role`` each unless ``engine.num_threads`` sets the engine's) — the local analogue
of the reference's half-and-half GPU split. Idle time of each role is measured against wall time: the
trainer is idle while waiting for groups, the engine while no request is in flight. ``mode="sync"``
(generate a batch, then train, then generate) exists only as the baseline.

The loop itself (slots, steps, stop conditions, checkpoints) is ``runtime.loop.RLLoop``, shared with the Ray
backend; ``LocalRuntime`` is its ``LoopHooks``: attempts on this process's engine, steps on the trainer thread,
weights handed to the engine in memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from fireflash.curation.config import CurationConfig
from fireflash.harness.config import HarnessConfig
from fireflash.protocols import (
    Engine,
    GenerateRequest,
    GenerateResult,
    Grader,
    Group,
    SandboxBackend,
    Task,
)
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import AttemptOutcome, ParentPool, scored_attempt
from fireflash.runtime.groups import Slot
from fireflash.runtime.loop import LoopStateView, RLLoop
from fireflash.runtime.memory import TrainerThread, memory_gb
from fireflash.tracking import MetricsWriter
from fireflash.training.trainer import Trainer


class BusyMeter:
    """Seconds during which at least one request was in flight, over any engines that share this meter."""

    def __init__(self) -> None:
        self._closed_busy_sec = 0.0  # busy periods that have ended
        self._inflight = 0
        self._since = 0.0

    @property
    def busy_sec(self) -> float:
        """Busy seconds so far, the period still open included (an engine that never drains is busy)."""
        open_sec = time.perf_counter() - self._since if self._inflight else 0.0
        return self._closed_busy_sec + open_sec

    def start(self) -> None:
        if self._inflight == 0:
            self._since = time.perf_counter()
        self._inflight += 1

    def stop(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._closed_busy_sec += time.perf_counter() - self._since


class MeteredEngine:
    """An ``Engine`` proxy that measures busy time (at least one request in flight), seconds.

    ``meter``: share one with other proxies (a rollout worker calling several engine servers) to measure the
    time any of them had a request from this worker; None gives this proxy its own.
    """

    def __init__(self, engine: Engine, meter: BusyMeter | None = None) -> None:
        self.engine = engine
        self.meter = meter if meter is not None else BusyMeter()

    @property
    def busy_sec(self) -> float:
        return self.meter.busy_sec

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        self.meter.start()
        try:
            return await self.engine.generate(requests)
        finally:
            self.meter.stop()

    async def update_weights(self, weights: Mapping[str, Any] | Path, version: int) -> None:
        await self.engine.update_weights(weights, version)

    async def pause(self) -> None:
        await self.engine.pause()

    async def resume(self) -> None:
        await self.engine.resume()


class LocalRuntime(LoopStateView):
    """Runs ``steps`` optimizer steps of asynchronous GRPO on one machine (RECIPE.md §1, §5).

    Builders hand it built parts (STYLE.md 15): the trainer owns the policy being trained, ``engine``
    samples with its own copy, ``graders`` maps a task to its grader.

    ``max_queued_groups`` bounds the groups queued for the trainer or still sampling (``groups.GroupQueue``):
    past it, workers open no new group until the trainer takes a batch or a group closes. ``mode="sync"``
    bounds it at ``groups_per_step`` (one batch sampled, then trained: every trained turn is fresh).
    ``trainer_threads``: torch threads of the trainer thread (``TrainerThread``); None inherits.
    ``cursor``: a checkpoint's (``Trainer.restore``) on ``--resume``: groups to rerun, the entropy history, the curation state.
    ``curation`` / ``probe_seed``: the draw of each new group's task (``RLLoop``; None: seeded shuffled order).
    ``mix``: ``[tasks.mix]``'s source → weight; each new group's source is drawn first (``RLLoop``; None: one pool).

    The loop is ``self.loop`` (``runtime.loop.RLLoop``); this class is its ``LoopHooks``.
    """

    def __init__(
        self,
        *,
        tasks: Sequence[Task],
        backend: SandboxBackend,
        engine: Engine,
        tokenizer: Any,
        trainer: Trainer,
        grader_for: Callable[[Task], Grader],
        harness: HarnessConfig,
        objective: ObjectiveConfig,
        run_dir: Path,
        steps: int,
        group_size: int,
        groups_per_step: int,
        max_inflight_attempts: int,
        max_attempt_retries: int,
        discard_zero_signal_groups: bool,
        seed: int,
        mode: Literal["async", "sync"] = "async",
        hang_margin_sec: float = 60.0,
        max_wall_sec: float | None = None,
        checkpoint_every_steps: int = 1,
        cursor: dict[str, Any] | None = None,
        writer: MetricsWriter | None = None,
        save_trajectories: bool = True,
        max_queued_groups: int | None = None,
        trainer_threads: int | None = None,
        curation: CurationConfig | None = None,
        probe_seed: Sequence[tuple[str, int, int, float]] = (),
        mix: Mapping[str, float] | None = None,
    ) -> None:
        self.backend, self.tokenizer, self.trainer, self.grader_for = backend, tokenizer, trainer, grader_for
        self.engine = MeteredEngine(engine)
        self.harness, self.run_dir, self.steps = harness, Path(run_dir), steps
        self.max_retries, self.hang_margin_sec = max_attempt_retries, hang_margin_sec
        self.parents = ParentPool(backend)
        # one thread, one malloc arena, its own torch thread budget: see runtime.memory
        self._trainer_thread = TrainerThread(num_threads=trainer_threads)
        self.loop = RLLoop(
            self, tasks=tasks, group_size=group_size, seed=seed, objective=objective, run_dir=self.run_dir, steps=steps,
            groups_per_step=groups_per_step, max_inflight_attempts=max_inflight_attempts,
            discard_zero_signal_groups=discard_zero_signal_groups, mode=mode, max_wall_sec=max_wall_sec,
            checkpoint_every_steps=checkpoint_every_steps, writer=writer, save_trajectories=save_trajectories,
            max_queued_groups=max_queued_groups, curation=curation, probe_seed=probe_seed, mix=mix,
        )
        self.loop.load_cursor(cursor)

    # ---- loop.LoopHooks: attempts on this process's engine, steps on the trainer thread ----

    @property
    def step(self) -> int:
        return self.trainer.step

    @property
    def weight_version(self) -> int:
        return self.trainer.weight_version

    async def attempt(self, slot: Slot) -> AttemptOutcome:
        return await scored_attempt(
            slot.task, lambda: self.parents.get(slot.task), self.engine, self.tokenizer, self.harness,
            self.grader_for(slot.task), slot.attempt_id, self.max_retries, self.hang_margin_sec,
        )

    async def train_step(self, groups: list[Group]) -> dict[str, float]:
        return await self._trainer_thread.run(self.trainer.train_step, groups, trim=True)

    async def publish_weights(self) -> None:
        weights = await self._trainer_thread.run(self.trainer.state_dict)
        await self.engine.update_weights(weights, self.trainer.weight_version)
        del weights  # the engine keeps its own copy; holding ours would double the weights until the next step

    async def save_checkpoint(self, cursor: dict[str, Any]) -> None:
        await self._trainer_thread.run(self.trainer.save_checkpoint, self.run_dir / "checkpoints", cursor)

    async def engine_busy_sec(self) -> float:
        return self.engine.busy_sec

    def engine_count(self) -> int:
        return 1

    def extra_metrics(self) -> dict[str, float]:
        rss, peak = memory_gb()
        return {"memory/rss_gb": rss, "memory/peak_rss_gb": peak}

    async def run(self) -> list[dict[str, float]]:
        """Run until ``steps`` optimizer steps are done; returns each step's metrics (``RLLoop.run``).

        Workers are cancelled when training finishes (their sandboxes are closed by ``scored_attempt``);
        parents are closed by the caller through ``backend.close()``.
        """
        try:
            return await self.loop.run()
        finally:
            self._trainer_thread.close()
