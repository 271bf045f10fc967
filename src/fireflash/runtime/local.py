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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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
from fireflash.rl.metrics import detect_entropy_rise
from fireflash.runtime.attempts import AttemptOutcome, ParentPool, scored_attempt
from fireflash.runtime.groups import GroupQueue, GroupScheduler, Slot, finish_group
from fireflash.runtime.memory import TrainerThread, memory_gb
from fireflash.runtime.tracking import MetricsWriter
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


@dataclass
class RolloutStats:
    """Counters since the last training step (reset by ``take``)."""

    attempts: int = 0
    lost_attempts: int = 0
    retries: int = 0
    aborted_tries: int = 0  # tries stopped from outside (weight-sync abort, shutdown): retried, never graded
    rewards: list[float] = field(default_factory=list)
    solved: int = 0
    sampled_tokens: list[int] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    groups_done: int = 0
    groups_zero_signal: int = 0
    groups_lost: int = 0

    def add(self, o: AttemptOutcome) -> None:
        self.attempts += 1
        self.retries += o.tries - 1
        self.aborted_tries += o.aborted_tries
        if o.lost:
            self.lost_attempts += 1
            return
        self.rewards.append(o.score.reward)
        self.solved += o.score.solved
        self.sampled_tokens.append(o.trajectory.n_sampled_tokens)
        self.turns.append(o.trajectory.n_turns)

    def take(self) -> dict[str, float]:
        """This window's counts; means over graded attempts (and the zero-signal share over finished groups)
        only when there were any: a window with none has no pass rate, not a pass rate of 0."""
        out = {
            "rollout/attempts": float(self.attempts),
            "rollout/lost_attempts": float(self.lost_attempts),
            "rollout/retries": float(self.retries),
            "rollout/aborted_tries": float(self.aborted_tries),
            "groups/done": float(self.groups_done),
            "groups/lost_to_infrastructure": float(self.groups_lost),
        }
        if graded := len(self.rewards):
            out |= {
                "rollout/reward_mean": sum(self.rewards) / graded,
                "rollout/pass_rate": self.solved / graded,
                "rollout/sampled_tokens_mean": sum(self.sampled_tokens) / graded,
                "rollout/turns_mean": sum(self.turns) / graded,
            }
        if self.groups_done:
            out["groups/zero_signal_share"] = self.groups_zero_signal / self.groups_done
        self.__init__()
        return out


async def settle_attempt(
    slot: Slot,
    outcome: AttemptOutcome,
    scheduler: GroupScheduler,
    queue: GroupQueue,
    objective: ObjectiveConfig,
    discard_zero_signal: bool,
    stats: Sequence[RolloutStats],
    trajectories_dir: Path | None,
) -> None:
    """After an attempt (both runtimes): count it, save its trajectory (a lost one: its last FAILED try's, as
    ``aNN.failed.json``), and once its group is complete, judge the group (advantages, zero signal, lost) and
    queue it for the trainer when it trains."""
    for s in stats:
        s.add(outcome)
    if trajectories_dir is not None and outcome.trajectory is not None:
        if outcome.score is not None:  # read back by people and by per-task pass-rate tables, not by training
            outcome.trajectory.metadata["score"] = outcome.score.model_dump(include={"reward", "solved", "reason"})
        path = trajectories_dir / f"g{slot.group_id:05d}" / f"a{slot.index:02d}.json"
        await asyncio.to_thread(outcome.trajectory.save, path)
    if trajectories_dir is not None and outcome.lost and outcome.failed_trajectories:  # for inspection only
        path = trajectories_dir / f"g{slot.group_id:05d}" / f"a{slot.index:02d}.failed.json"
        await asyncio.to_thread(outcome.failed_trajectories[-1].save, path)
    complete = scheduler.record(slot, outcome)
    if complete is None:
        return
    verdict = finish_group(slot.task.id, complete, objective, discard_zero_signal)
    for s in stats:
        s.groups_done += 1
        s.groups_zero_signal += verdict.kind == "zero_signal"
        s.groups_lost += verdict.kind == "lost"
    if verdict.kind == "train":
        queue.put(slot.group_id, verdict.group)
    else:
        queue.closed_without_training()


class LocalRuntime:
    """Runs ``steps`` optimizer steps of asynchronous GRPO on one machine (RECIPE.md §1, §5).

    Builders hand it built parts (STYLE.md 15): the trainer owns the policy being trained, ``engine``
    samples with its own copy, ``graders`` maps a task to its grader.

    ``max_queued_groups`` bounds the groups queued for the trainer or still sampling (``groups.GroupQueue``):
    past it, workers open no new group until the trainer takes a batch or a group closes. ``mode="sync"``
    bounds it at ``groups_per_step`` (one batch sampled, then trained: every trained turn is fresh).
    ``trainer_threads``: torch threads of the trainer thread (``TrainerThread``); None inherits.
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
    ) -> None:
        self.backend, self.tokenizer, self.trainer, self.grader_for = backend, tokenizer, trainer, grader_for
        self.engine = MeteredEngine(engine)
        self.harness, self.objective, self.run_dir = harness, objective, Path(run_dir)
        self.steps, self.groups_per_step, self.mode = steps, groups_per_step, mode
        self.max_inflight, self.max_retries = max_inflight_attempts, max_attempt_retries
        self.hang_margin_sec, self.max_wall_sec = hang_margin_sec, max_wall_sec
        self.stopped_at_wall_limit = False
        self.discard_zero_signal = discard_zero_signal_groups
        self.checkpoint_every = checkpoint_every_steps
        self.scheduler = GroupScheduler(tasks, group_size, seed, cursor)
        self.writer, self.save_trajectories = writer, save_trajectories
        # sync mode samples exactly one step's groups, then trains on them: no group opens ahead on old weights
        bound = groups_per_step if mode == "sync" else max_queued_groups
        self.queue = GroupQueue(groups_per_step, objective.max_staleness, bound)  # complete groups for the trainer
        self.stats = RolloutStats()  # since the last step (reset by each step's metrics)
        self.total = RolloutStats()  # over the whole run (live progress)
        self.running_attempts = 0
        self.entropy_history: list[float] = []
        self.history: list[dict[str, float]] = []
        self.parents = ParentPool(backend)
        self._generate = asyncio.Event()
        # one thread, one malloc arena, its own torch thread budget: see runtime.memory
        self._trainer_thread = TrainerThread(num_threads=trainer_threads)

    async def _attempt(self, slot: Slot) -> AttemptOutcome:
        return await scored_attempt(
            slot.task, lambda: self.parents.get(slot.task), self.engine, self.tokenizer, self.harness,
            self.grader_for(slot.task), slot.attempt_id, self.max_retries, self.hang_margin_sec,
        )

    async def _worker(self) -> None:
        while True:
            await self.queue.wait_for_room(self.scheduler)
            # checked after every wait, right before the slot: a woken wait() or wait_for_room() does not mean
            # the trainer still lets the engine sample (it may have set, taken a batch and cleared meanwhile)
            if self.mode == "sync" and not self._generate.is_set():
                await self._generate.wait()
                continue
            slot = self.scheduler.next_slot()
            self.running_attempts += 1
            try:
                outcome = await self._attempt(slot)
            finally:
                self.running_attempts -= 1
            await settle_attempt(
                slot, outcome, self.scheduler, self.queue, self.objective, self.discard_zero_signal, (self.stats, self.total),
                self.run_dir / "trajectories" if self.save_trajectories else None,
            )

    async def _next_batch(self, deadline: float | None) -> tuple[list[Group], float] | None:
        """The next step's groups, or None when ``deadline`` (event-loop time) passes first."""
        start = time.perf_counter()
        self._generate.set()
        groups = await self.queue.take(deadline)
        if groups is None:
            return None
        if self.mode == "sync":  # drain: the engine must be idle while the trainer works
            self._generate.clear()
            while self.running_attempts:
                await asyncio.sleep(0.05)
        return groups, time.perf_counter() - start

    async def _train(self) -> None:
        wall0, trainer_busy = time.perf_counter(), 0.0
        busy0 = self.engine.busy_sec
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wall_sec if self.max_wall_sec is not None else None
        while self.trainer.step < self.steps:
            # checked before taking groups too: with groups already queued, take() returns at once, and a run
            # past its wall limit would go on stepping (a 2,700 s run ran 2,900 s before this check)
            past = deadline is not None and loop.time() >= deadline
            batch = None if past else await self._next_batch(deadline)
            if batch is None:
                self.stopped_at_wall_limit = True
                if self.trainer.step % self.checkpoint_every:  # steps since the last checkpoint would be lost
                    await self._checkpoint()
                return
            groups, waited = batch
            metrics = await self._trainer_thread.run(self.trainer.train_step, groups, trim=True)
            weights = await self._trainer_thread.run(self.trainer.state_dict)
            await self.engine.update_weights(weights, self.trainer.weight_version)
            del weights  # the engine keeps its own copy; holding ours would double the weights until the next step
            trainer_busy += metrics["step_sec"]
            wall = time.perf_counter() - wall0
            self.entropy_history.append(metrics.get("entropy/mean", 0.0))
            rise = detect_entropy_rise(self.entropy_history, self.objective.entropy_window_steps, self.objective.entropy_rise_threshold)
            rss, peak = memory_gb()
            metrics |= self.stats.take() | {
                "weight_version": float(self.trainer.weight_version),
                "trainer/wait_sec": waited,
                "trainer/idle_share": 1.0 - trainer_busy / wall,
                "engine/idle_share": 1.0 - (self.engine.busy_sec - busy0) / wall,
                "queue/groups": float(len(self.queue)),
                "rollout/running": float(self.running_attempts),
                "entropy/rise": rise.rise,
                "entropy/warning": float(rise.warning),
                "wall_sec": wall,
                "memory/rss_gb": rss,
                "memory/peak_rss_gb": peak,
            }
            self.history.append(metrics)
            # the row before the checkpoint: a kill between the two then reruns a logged step (its row is
            # dropped on resume) instead of losing the row of a checkpointed one
            if self.writer is not None:
                self.writer.write(self.trainer.step, metrics)
            if self.trainer.step % self.checkpoint_every == 0 or self.trainer.step == self.steps:
                await self._checkpoint()

    async def _checkpoint(self) -> None:
        cursor = self.scheduler.cursor(self.queue.group_ids())
        await self._trainer_thread.run(self.trainer.save_checkpoint, self.run_dir / "checkpoints", cursor)

    async def run(self) -> list[dict[str, float]]:
        """Run until ``steps`` optimizer steps are done; returns each step's metrics.

        Workers are cancelled when training finishes (their sandboxes are closed by ``scored_attempt``);
        parents are closed by the caller through ``backend.close()``. Metrics rows past the trainer's
        (restored) step, left by a run killed after its last checkpoint, are dropped first.
        """
        if self.writer is not None:
            self.writer.drop_after(self.trainer.step)
        workers = [asyncio.create_task(self._worker()) for _ in range(self.max_inflight)]
        try:
            trainer = asyncio.create_task(self._train())
            done, _ = await asyncio.wait([trainer, *workers], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a worker or the trainer raised: surface it (workers never end on their own)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self._trainer_thread.close()
        return self.history
