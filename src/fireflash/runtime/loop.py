"""The asynchronous RL loop, once for both backends (RECIPE.md §1): rollout slots feed the trainer, which steps,
publishes weights, logs and checkpoints.

    slot loop × max_inflight_attempts                       step loop
      queue.wait_for_room (sync: wait for the gate)           wall limit passed? → checkpoint, stop
      scheduler.next_slot → hooks.attempt(slot)               take groups_per_step groups (sync: drain slots)
      settle_attempt: count, save, judge, queue  ─────────►   hooks.train_step → hooks.publish_weights
                                                              metrics row, then checkpoint (every N steps)

``LocalRuntime`` (runtime.local) and ``RayRuntime`` (runtime.ray_backend) differ only in the ``LoopHooks`` they
hand ``RLLoop``: where attempts and train steps run and how new weights reach the engines. Every rule of the
loop lives here: the bound on queued groups, the sync-mode gate and drain, the wall deadline (checked before
queued groups are taken), the checkpoint at the wall limit, steps skipped for want of fresh tokens, the order
row-then-checkpoint, and the run state a checkpoint carries (data cursor, entropy history).

    loop = RLLoop(hooks, tasks=..., group_size=4, seed=0, objective=..., run_dir=..., steps=10, ...)
    loop.load_cursor(cursor)            # None for a fresh run; a checkpoint's cursor on --resume
    history = await loop.run()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from fireflash.curation.config import CurationConfig
from fireflash.curation.mix import SourceMix
from fireflash.curation.sampler import TaskSampler
from fireflash.protocols import Group, Task
from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.metrics import detect_entropy_rise
from fireflash.rollout.attempts import AttemptOutcome
from fireflash.runtime.groups import GroupQueue, GroupScheduler, Slot, finish_group
from fireflash.tracking import MetricsWriter
from fireflash.training.batch import NoSampledTokens

log = logging.getLogger(__name__)


@runtime_checkable
class LoopHooks(Protocol):
    """What a backend supplies to ``RLLoop``: where attempts and steps run, and how weights travel.

    ``step`` / ``weight_version``: optimizer steps done (restored ones included) and the trainer's weight version.
    """

    @property
    def step(self) -> int: ...

    @property
    def weight_version(self) -> int: ...

    async def attempt(self, slot: Slot) -> AttemptOutcome:
        """Run and grade ``slot``'s attempt with the newest weights; infrastructure failures are retried inside
        and end as a lost outcome, never raised."""
        ...

    async def train_step(self, groups: list[Group]) -> dict[str, float]:
        """One optimizer step on ``groups``; its metrics (with ``step_sec``). ``step`` and ``weight_version``
        are the new ones after it. Raises ``training.batch.NoSampledTokens`` (``AllTokensStale`` among them)
        before any state changes when there is nothing to train on."""
        ...

    async def publish_weights(self) -> None:
        """Send the trainer's current weights, tagged ``weight_version``, to every rollout engine."""
        ...

    async def save_checkpoint(self, cursor: dict[str, Any]) -> None:
        """Checkpoint the trainer at ``step`` with ``cursor`` (``RLLoop.cursor``) under ``run_dir/checkpoints``."""
        ...

    async def engine_busy_sec(self) -> float:
        """Seconds the rollout engines had a request in flight since the run started, summed over engines."""
        ...

    def engine_count(self) -> int:
        """Engines that ``engine_busy_sec`` sums over (at least 1)."""
        ...

    def extra_metrics(self) -> dict[str, float]:
        """The backend's own keys of a step's metrics row (memory, worker restarts, ...)."""
        ...



class TrainingStalled(RuntimeError):
    """The trainer refused more batches in a row (every token stale, or none sampled) than stale ones can be
    queued: no fresh turn is reaching it, so the run would only spin."""


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
    groups_cancelled: int = 0  # closed early by the early-stop rule (issue 29); also counted zero-signal
    cancelled_attempts: int = 0  # attempts running when their group was cancelled, stopped unfinished

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
            "groups/cancelled": float(self.groups_cancelled),
            "rollout/cancelled_attempts": float(self.cancelled_attempts),
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
    cancel_group: Callable[[int], int] | None = None,
) -> None:
    """After an attempt: count it, save its trajectory (a lost one: its last failed or aborted try's, as
    ``aNN.failed.json``), and once its group is complete, judge the group (advantages, zero signal, lost) and
    queue it for the trainer when it trains. A group the early-stop rule closes before it is complete
    (``GroupScheduler.cancel_if_doomed``) counts as zero-signal and cancelled; ``cancel_group(group_id)``
    cancels its attempts still running and returns how many."""
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
        if scheduler.cancel_if_doomed(slot.group_id) is not None:
            stopped = cancel_group(slot.group_id) if cancel_group is not None else 0
            for s in stats:
                s.groups_done += 1
                s.groups_zero_signal += 1
                s.groups_cancelled += 1
                s.cancelled_attempts += stopped
            queue.closed_without_training()
        return
    verdict = finish_group(slot.task.id, complete, objective, discard_zero_signal)
    scheduler.settle(slot.group_id, slot.task.id, complete)  # the task's pass-rate state (online curation)
    for s in stats:
        s.groups_done += 1
        s.groups_zero_signal += verdict.kind == "zero_signal"
        s.groups_lost += verdict.kind == "lost"
    if verdict.kind == "train":
        queue.put(slot.group_id, verdict.group)
    else:
        queue.closed_without_training()


class RLLoop:
    """Runs ``steps`` optimizer steps of asynchronous GRPO through a backend's ``hooks`` (RECIPE.md §1, §5).

    ``max_inflight_attempts`` slot loops keep attempts running whatever the trainer does (``mode="async"``);
    ``mode="sync"`` (the baseline) samples one step's groups, drains every attempt, then trains. Groups queued
    or still sampling are bounded by ``max_queued_groups`` (``groups.GroupQueue``; ``groups_per_step`` in sync
    mode). The run stops after ``steps`` steps or once ``max_wall_sec`` has passed, checked before every batch
    is taken (with groups queued, taking one returns at once), checkpointing the steps since the last
    checkpoint. A batch the trainer refuses (``NoSampledTokens``, e.g. every token stale) is a skipped step:
    no weights published, no row, and its groups are dropped (they would stay stale); ``trainer/skipped_steps``
    in the next row counts it. More refused batches in a row than the queue can hold stale ones (every queued
    group plus one step of slack) means no fresh turn is coming, e.g. an engine reporting wrong weight
    versions: the run stops with ``TrainingStalled`` after logging the count, never spins until the wall limit.

    ``curation`` (``[runtime.curation]``, issue 29): each new group's task is drawn by a
    ``curation.sampler.TaskSampler`` seeded with ``probe_seed`` (``(task_id, passes, attempts, mean_reward)``
    per probed task), whose state the checkpoint cursor carries and whose ``curation/*`` metrics join every
    row; None keeps the seeded shuffled order without curation state.

    ``mix`` (``[tasks.mix]``, issue 30): source name → weight; each task's source is its ``metadata["source"]``
    (``curation.pool.load_mix_pool``). Each new group's source is drawn by weight (``curation.mix.SourceMix``),
    then its task within that source as above; the counts ride in the cursor (``cursor["mix"]``) and
    ``mix/<source>/*`` (weight, groups drawn and trained, cumulative shares) join every row. None: one pool.

    Call ``load_cursor`` before ``run``. Other args: as ``LocalRuntime``.
    """

    def __init__(
        self,
        hooks: LoopHooks,
        *,
        tasks: Sequence[Task],
        group_size: int,
        seed: int,
        objective: ObjectiveConfig,
        run_dir: Path,
        steps: int,
        groups_per_step: int,
        max_inflight_attempts: int,
        discard_zero_signal_groups: bool,
        mode: Literal["async", "sync"] = "async",
        max_wall_sec: float | None = None,
        checkpoint_every_steps: int = 1,
        writer: MetricsWriter | None = None,
        save_trajectories: bool = True,
        max_queued_groups: int | None = None,
        curation: CurationConfig | None = None,
        probe_seed: Sequence[tuple[str, int, int, float]] = (),
        mix: Mapping[str, float] | None = None,
    ) -> None:
        self.hooks = hooks
        self.mix_weights = dict(mix) if mix else None
        self.mix: SourceMix | None = None  # set by load_cursor when a mix is given
        self.curation, self.probe_seed = curation, list(probe_seed)
        self.sampler: TaskSampler | None = None  # set by load_cursor when curation is on
        self.tasks, self.group_size, self.seed = list(tasks), group_size, seed
        self.objective, self.steps, self.mode = objective, steps, mode
        self.max_inflight, self.discard_zero_signal = max_inflight_attempts, discard_zero_signal_groups
        self.max_wall_sec, self.checkpoint_every, self.writer = max_wall_sec, checkpoint_every_steps, writer
        self.trajectories_dir = Path(run_dir) / "trajectories" if save_trajectories else None
        # sync mode samples exactly one step's groups, then trains on them: no group opens ahead on old weights
        bound = groups_per_step if mode == "sync" else max_queued_groups
        self.queue = GroupQueue(groups_per_step, objective.max_staleness, bound)  # complete groups for the trainer
        self.scheduler: GroupScheduler | None = None  # set by load_cursor
        self.stats = RolloutStats()  # since the last step (reset by each step's metrics)
        self.total = RolloutStats()  # over the whole run (live progress)
        self.running_attempts = 0
        self._attempts: dict[int, set[asyncio.Task[AttemptOutcome]]] = {}  # group id → its attempts running
        self.entropy_history: list[float] = []  # mean entropy of every step of the run, resumed ones included
        self.history: list[dict[str, float]] = []
        self.skipped_steps = 0  # batches refused by the trainer since the last row
        # a refusal drops its groups and opens room for fresh ones: past this many in a row none is coming
        self.max_skipped_in_a_row = -(-self.queue.max_queued // groups_per_step) + 1
        self.stopped_at_wall_limit = False
        self._generate = asyncio.Event()  # sync mode: set while the engines may sample
        self._saved_step: int | None = None  # the step of the last checkpoint this run wrote or resumed from

    def load_cursor(self, cursor: dict[str, Any] | None) -> None:
        """Start from ``cursor`` (a checkpoint's, on ``--resume``: groups to rerun, entropy history) or afresh.

        Raises:
            ValueError: the cursor names tasks not in the pool, or the pool is empty (``GroupScheduler``); with
                a mix, a task without a source or a source without a task (``SourceMix``).
        """
        self.sampler = None
        self.mix = None
        if self.mix_weights is not None:
            self.mix = SourceMix.from_tasks(self.tasks, self.mix_weights, self.seed)
            if cursor and "mix" in cursor:
                self.mix.load_state_dict(cursor["mix"])
        if self.curation is not None:
            self.sampler = TaskSampler([t.id for t in self.tasks], self.curation, self.group_size, self.seed)
            if cursor and "curation" in cursor:  # the probe's seed is in the saved state already
                self.sampler.load_state_dict(cursor["curation"])
            else:
                self.sampler.seed_probe(self.probe_seed)
        self.scheduler = GroupScheduler(self.tasks, self.group_size, self.seed, cursor, self.sampler, self.mix)
        self.entropy_history = list((cursor or {}).get("entropy_history", []))

    def cursor(self) -> dict[str, Any]:
        """What a checkpoint carries for ``--resume``: the scheduler's cursor (queued groups rerun), the
        entropy history, so the entropy-rise detector's lowest window survives the resume, and the curation
        state (per-task outcome counts, streaks, retirements) and the mix's per-source counts. JSON-able."""
        assert self.scheduler is not None, "load_cursor first"
        out = self.scheduler.cursor({gid: g.task_id for gid, g in self.queue.items})
        out["entropy_history"] = list(self.entropy_history)
        if self.sampler is not None:
            out["curation"] = self.sampler.state_dict(int(g) for g in out["unfinished"])
        if self.mix is not None:
            out["mix"] = self.mix.state_dict()
        return out

    async def run(self) -> list[dict[str, float]]:
        """Run until ``steps`` optimizer steps are done (or the wall limit); returns each step's metrics.

        Metrics rows past the trainer's (restored) step, left by a run killed after its last checkpoint, are
        dropped first. The slot loops are cancelled when training ends (``scored_attempt`` closes their
        sandboxes); an exception of a slot loop or of the step loop is raised.
        """
        if self.scheduler is None:
            raise RuntimeError("RLLoop.run before load_cursor: call load_cursor(None) for a fresh run")
        if self.writer is not None:
            self.writer.drop_after(self.hooks.step)
        self._saved_step = self.hooks.step  # a resumed run's checkpoint, or nothing to save at step 0
        if self.sampler is not None:
            self.sampler.weight_version = self.hooks.weight_version
        loops = [asyncio.create_task(self._slot_loop()) for _ in range(self.max_inflight)]
        try:
            loops.append(asyncio.create_task(self._step_loop()))
            done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a slot loop or the trainer raised: surface it (slot loops never end on their own)
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        return self.history

    async def _slot_loop(self) -> None:
        assert self.scheduler is not None
        while True:
            await self.queue.wait_for_room(self.scheduler)
            # checked after every wait, right before the slot: a woken wait() or wait_for_room() does not mean
            # the trainer still lets the engines sample (it may have set, taken a batch and cleared meanwhile)
            if self.mode == "sync" and not self._generate.is_set():
                await self._generate.wait()
                continue
            slot = self.scheduler.next_slot()
            # a task of its own, so an early stop can cancel this attempt and not the loop: the backends'
            # cancellation path (scored_attempt closes the sandbox; Ray's attempt cancels the remote call)
            attempt = asyncio.create_task(self.hooks.attempt(slot))
            self._attempts.setdefault(slot.group_id, set()).add(attempt)
            self.running_attempts += 1
            try:
                outcome = await attempt
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if attempt.cancelled() and current is not None and not current.cancelling():
                    continue  # its group was cancelled (_cancel_group), this loop was not: next slot
                raise
            finally:
                self.running_attempts -= 1
                running = self._attempts.get(slot.group_id)
                if running is not None:
                    running.discard(attempt)
                    if not running:
                        del self._attempts[slot.group_id]
            await settle_attempt(
                slot, outcome, self.scheduler, self.queue, self.objective, self.discard_zero_signal,
                (self.stats, self.total), self.trajectories_dir, self._cancel_group,
            )

    def _cancel_group(self, group_id: int) -> int:
        """Cancel the attempts of ``group_id`` still running (an early stop); how many."""
        running = self._attempts.pop(group_id, set())
        for attempt in running:
            attempt.cancel()
        return len(running)

    async def _next_batch(self, deadline: float | None) -> tuple[list[Group], float] | None:
        """The next step's groups, or None when ``deadline`` (event-loop time) passes first."""
        start = time.perf_counter()
        self._generate.set()
        groups = await self.queue.take(deadline)
        if groups is None:
            return None
        if self.mode == "sync":  # drain: the engines must be idle while the trainer works
            self._generate.clear()
            while self.running_attempts:
                await asyncio.sleep(0.05)
        return groups, time.perf_counter() - start

    async def _step_loop(self) -> None:
        hooks = self.hooks
        wall0, trainer_busy = time.perf_counter(), 0.0
        busy0 = await hooks.engine_busy_sec()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wall_sec if self.max_wall_sec is not None else None
        while hooks.step < self.steps:
            # checked before taking groups too: with groups already queued, take() returns at once, and a run
            # past its wall limit would go on stepping (a 2,700 s run ran 2,900 s before this check)
            past = deadline is not None and loop.time() >= deadline
            batch = None if past else await self._next_batch(deadline)
            if batch is None:
                self.stopped_at_wall_limit = True
                if self.skipped_steps:  # no row follows to count them
                    log.warning("%d refused batches after step %d are in no metrics row", self.skipped_steps, hooks.step)
                if hooks.step != self._saved_step:  # steps since the last checkpoint would be lost
                    await self._checkpoint()
                return
            groups, waited = batch
            try:
                metrics = await hooks.train_step(groups)
            except NoSampledTokens as e:  # refused before any state changed: nothing to publish or save
                self.skipped_steps += 1
                # the last line: a trainer actor's error arrives wrapped in its remote traceback
                reason = str(e).strip().splitlines()[-1]
                log.warning("skipped a step after step %d: %s", hooks.step, reason)
                if self.skipped_steps >= self.max_skipped_in_a_row:
                    raise TrainingStalled(
                        f"the trainer refused {self.skipped_steps} batches in a row after step {hooks.step} "
                        f"(weight version {hooks.weight_version}), more than the queue holds: no fresh turn is "
                        f"coming. Last refusal: {reason}. Check that the engines report the weight version they "
                        f"sampled with and receive every update (engine.*), or raise rl.max_staleness"
                    ) from e
                continue
            await hooks.publish_weights()
            if self.mix is not None:
                self.mix.count_trained(g.task_id for g in groups)
            if self.sampler is not None:  # groups settled from now on were sampled with the new weights
                self.sampler.weight_version = hooks.weight_version
            trainer_busy += metrics["step_sec"]
            wall = time.perf_counter() - wall0
            engine_busy = await hooks.engine_busy_sec() - busy0
            self.entropy_history.append(metrics.get("entropy/mean", 0.0))
            rise = detect_entropy_rise(
                self.entropy_history, self.objective.entropy_window_steps, self.objective.entropy_rise_threshold
            )
            metrics |= self.stats.take() | {
                "weight_version": float(hooks.weight_version),
                "trainer/wait_sec": waited,
                "trainer/idle_share": 1.0 - trainer_busy / wall,
                "trainer/skipped_steps": float(self.skipped_steps),
                "engine/idle_share": 1.0 - engine_busy / (wall * max(hooks.engine_count(), 1)),
                "queue/groups": float(len(self.queue)),
                "rollout/running": float(self.running_attempts),
                "entropy/rise": rise.rise,
                "entropy/warning": float(rise.warning),
                "wall_sec": wall,
            } | hooks.extra_metrics() | (self.sampler.metrics() if self.sampler is not None else {}) | (
                self.mix.metrics() if self.mix is not None else {})
            self.skipped_steps = 0
            self.history.append(metrics)
            # the row before the checkpoint: a kill between the two then reruns a logged step (its row is
            # dropped on resume) instead of losing the row of a checkpointed one
            if self.writer is not None:
                self.writer.write(hooks.step, metrics)
            if hooks.step % self.checkpoint_every == 0 or hooks.step == self.steps:
                await self._checkpoint()

    async def _checkpoint(self) -> None:
        await self.hooks.save_checkpoint(self.cursor())
        self._saved_step = self.hooks.step


class LoopStateView:
    """The loop's state under the names the live view (``job.py``) and callers read, for a runtime that holds
    its ``RLLoop`` as ``self.loop`` (both backends; read-only)."""

    loop: RLLoop

    @property
    def history(self) -> list[dict[str, float]]:
        return self.loop.history

    @property
    def total(self) -> RolloutStats:
        return self.loop.total

    @property
    def queue(self) -> GroupQueue:
        return self.loop.queue

    @property
    def scheduler(self) -> GroupScheduler | None:
        return self.loop.scheduler

    @property
    def running_attempts(self) -> int:
        return self.loop.running_attempts

    @property
    def stopped_at_wall_limit(self) -> bool:
        return self.loop.stopped_at_wall_limit
