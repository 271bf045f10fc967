"""Which attempt to run next, and how finished attempts become trainable groups (RECIPE.md §1, §5).

``GroupScheduler`` hands out attempt slots group by group in a seeded task order and keeps a cursor
(what was issued, what finished) that a checkpoint saves, so ``--resume`` re-issues exactly the groups
that had not reached the trainer. ``finish_group`` turns a group's outcomes into a ``Group`` with
advantages, or says why it carries nothing: lost to infrastructure (an attempt was lost after its
retries) or zero signal (every R' equal, or no attempt sampled a token). ``cancel_if_doomed`` closes a group
early when the sampler's early-stop rule says its finished attempts already decide it (issue 29): the loop
then cancels its attempts still running, and their outcomes, if any arrive, are ignored.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch

from fireflash.protocols import Group, Task
from fireflash.rl.advantages import group_advantages
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import AttemptOutcome

if TYPE_CHECKING:
    from fireflash.curation.mix import SourceMix
    from fireflash.curation.sampler import TaskSampler


@dataclass
class Slot:
    """One attempt to run: attempt ``index`` of group ``group_id`` at ``task``."""

    group_id: int
    task: Task
    index: int

    @property
    def attempt_id(self) -> str:
        return f"{self.task.id}/g{self.group_id}/a{self.index}"


@dataclass
class _Pending:
    task: Task
    outcomes: list[AttemptOutcome] = field(default_factory=list)
    issued: int = 0


class GroupScheduler:
    """Issues attempt slots for groups of ``group_size`` attempts, tasks in a seeded shuffled order or drawn by
    ``sampler`` (online curation, issue 29).

    Args:
        tasks: the training pool (non-empty).
        group_size: attempts per group (RECIPE.md §5: 12).
        seed: seed of the task order; epoch e uses ``seed + e``.
        cursor: a saved ``cursor()`` to resume from.
        sampler: draws each new group's task (``curation.sampler.TaskSampler``, given the shuffled order's
            choice for its uniform mode) and hears every settled group (``settle``); None: the shuffled order.
        mix: draws each new group's source first (``curation.mix.SourceMix``, ``[tasks.mix]``, issue 30); the
            task is then drawn within that source: its own shuffled order (epoch e of a source: its k-th group
            with e = k // its task count) or the sampler restricted to it. None: one pool.

    Raises:
        ValueError: an empty pool, or a cursor naming a task not in the pool.
    """

    def __init__(
        self, tasks: Sequence[Task], group_size: int, seed: int, cursor: dict[str, Any] | None = None,
        sampler: TaskSampler | None = None, mix: SourceMix | None = None,
    ):
        if not tasks:
            raise ValueError("the task pool is empty: check tasks.paths (and tasks.pool_manifest)")
        self.tasks = {t.id: t for t in tasks}
        self.group_size, self.seed, self.sampler, self.mix = group_size, seed, sampler, mix
        self._source_ids = {s: frozenset(ids) for s, ids in mix.task_ids.items()} if mix is not None else {}
        self.next_group = 0
        self.pending: dict[int, _Pending] = {}
        self._reissue: list[int] = []
        if cursor:
            unknown = [tid for tid in cursor["unfinished"].values() if tid not in self.tasks]
            if unknown:
                raise ValueError(f"resume cursor names tasks not in the pool: {unknown}; use the same tasks.paths")
            self.next_group = cursor["next_group"]
            for gid, tid in sorted(cursor["unfinished"].items(), key=lambda kv: int(kv[0])):
                self.pending[int(gid)] = _Pending(self.tasks[tid])
                self._reissue.append(int(gid))

    def _task_for(self, group_id: int, ids: Sequence[str] | None = None) -> Task:
        """Entry ``group_id`` of the seeded shuffled order over ``ids`` (default: the whole pool)."""
        ids = sorted(self.tasks if ids is None else ids)
        epoch, pos = divmod(group_id, len(ids))
        random.Random(self.seed + epoch).shuffle(ids)
        return self.tasks[ids[pos]]

    def next_slot(self) -> Slot:
        """The next attempt to run: the oldest group with attempts left to issue, else a new group."""
        for gid in self._reissue + sorted(self.pending):
            p = self.pending.get(gid)
            if p is not None and p.issued < self.group_size:
                p.issued += 1
                return Slot(gid, p.task, p.issued - 1)
        gid = self.next_group
        self.next_group += 1
        among = None
        if self.mix is None:
            task = self._task_for(gid)
        else:
            source = self.mix.draw(gid)
            among = self._source_ids[source]
            task = self._task_for(self.mix.drawn[source] - 1, self.mix.task_ids[source])
        if self.sampler is not None:
            task = self.tasks[self.sampler.draw(gid, [p.task.id for p in self.pending.values()], task.id, among)]
        self.pending[gid] = _Pending(task, issued=1)
        return Slot(gid, task, 0)

    def record(self, slot: Slot, outcome: AttemptOutcome) -> list[AttemptOutcome] | None:
        """Store a finished attempt; returns the group's outcomes once all ``group_size`` are in. An attempt of
        a group already closed by ``cancel_if_doomed`` (it finished as its cancellation was asked) is dropped."""
        p = self.pending.get(slot.group_id)
        if p is None:
            return None
        p.outcomes.append(outcome)
        if len(p.outcomes) < self.group_size:
            return None
        del self.pending[slot.group_id]
        if slot.group_id in self._reissue:
            self._reissue.remove(slot.group_id)
        return sorted(p.outcomes, key=lambda o: o.attempt_id)

    def cancel_if_doomed(self, group_id: int) -> int | None:
        """Close open group ``group_id`` if the sampler's early-stop rule (``TaskSampler.doomed``) says its
        finished attempts decide it carries no signal: no more of its attempts are issued, the sampler counts it
        (``settle`` with ``unfinished``) and a checkpoint no longer re-issues it.

        Returns:
            The attempts left unfinished (running, which the caller cancels, or never issued); None when the
            group stays open (no sampler, a lost attempt among the finished ones, or the rule says no).
        """
        p = self.pending.get(group_id)
        if self.sampler is None or p is None or any(o.lost for o in p.outcomes):
            return None
        finished = [(o.score.solved, o.score.reward) for o in p.outcomes]
        if not self.sampler.doomed(p.task.id, finished):
            return None
        del self.pending[group_id]
        if group_id in self._reissue:
            self._reissue.remove(group_id)
        unfinished = self.group_size - len(p.outcomes)
        self.sampler.settle(group_id, p.task.id, finished, unfinished=unfinished)
        return unfinished

    def settle(self, group_id: int, task_id: str, outcomes: Sequence[AttemptOutcome]) -> None:
        """Tell the sampler how a complete group went (a group with a lost attempt says nothing of the task)."""
        if self.sampler is None:
            return
        if any(o.lost for o in outcomes):
            self.sampler.predicted.pop(group_id, None)
            return
        self.sampler.settle(group_id, task_id, [(o.score.solved, o.score.reward) for o in outcomes])

    @property
    def open_groups(self) -> int:
        """Groups issued whose attempts are not all finished (still sampling)."""
        return len(self.pending)

    def opens_group(self) -> bool:
        """Whether ``next_slot`` would start a new group (every open group has all its attempts issued)."""
        return all(p.issued >= self.group_size for p in self.pending.values())

    def cursor(self, queued: Sequence[int] | Mapping[int, str] = ()) -> dict[str, Any]:
        """JSON-able state. Groups issued but not trained (``pending`` and the ``queued`` ones) rerun on resume.

        ``queued``: the queued groups' ids → task ids (needed when a sampler or a mix drew them), or their ids
        alone (the shuffled order recomputes their tasks).

        Raises:
            ValueError: ids alone with a mix (a group's task depends on the sources drawn before it).
        """
        if self.mix is not None and not isinstance(queued, Mapping):
            raise ValueError("GroupScheduler.cursor with a task mix needs the queued groups' task ids (a mapping)")
        queued_tasks = dict(queued) if isinstance(queued, Mapping) else {g: self._task_for(g).id for g in queued}
        unfinished = {gid: p.task.id for gid, p in self.pending.items()} | queued_tasks
        return {"next_group": self.next_group, "unfinished": {str(g): unfinished[g] for g in sorted(unfinished)}}


@dataclass
class GroupVerdict:
    """What became of a complete set of outcomes."""

    kind: Literal["train", "zero_signal", "lost"]
    group: Group | None
    outcomes: list[AttemptOutcome]


def finish_group(task_id: str, outcomes: Sequence[AttemptOutcome], objective: ObjectiveConfig, discard_zero_signal: bool) -> GroupVerdict:
    """Advantages for a complete group, or the reason it cannot train (RECIPE.md §1, §5).

    A group with a lost attempt is ``lost`` (a biased group is worse than none); one whose R' are all
    equal is ``zero_signal`` (discarded when ``discard_zero_signal``). One whose attempts sampled no token
    at all is ``zero_signal`` and discarded whatever ``discard_zero_signal`` says: it has no gradient, and
    the trainer refuses a step on it (``training.batch.NoSampledTokens``) rather than bump the version.
    """
    outcomes = list(outcomes)
    if any(o.lost for o in outcomes):
        return GroupVerdict("lost", None, outcomes)
    trajectories = [o.trajectory for o in outcomes]
    scores = [o.score for o in outcomes]
    adv = group_advantages(
        torch.tensor([s.reward for s in scores], dtype=torch.float64),
        torch.tensor([s.solved for s in scores]),
        torch.tensor([t.n_sampled_tokens for t in trajectories]),
        objective,
    )
    group = Group(task_id=task_id, trajectories=trajectories, scores=scores, advantages=adv.advantages.tolist())
    if (adv.zero_signal and discard_zero_signal) or not any(t.n_sampled_tokens for t in trajectories):
        return GroupVerdict("zero_signal", group, outcomes)
    return GroupVerdict("train", group, outcomes)


class GroupQueue:
    """Complete groups waiting for the trainer, oldest first; shared by the local and Ray runtimes.

    ``max_queued`` (default ``groups_per_step × max_staleness``) bounds the groups *ahead of a new one*: those
    queued here plus those still sampling (``GroupScheduler.open_groups``). A group opened behind ``n`` others
    is trained about ``ceil((n + 1) / groups_per_step) - 1`` versions after its first turn was sampled, so at
    the default its first turns are at most ``max_staleness - 1`` versions stale: one version of slack for
    groups that finish out of order. Counting only the queued groups (before 2026-12-01) let the groups
    still sampling add their versions on top: when rollouts outpaced the trainer (runs/rl12: 12–14 queued,
    2 per step) most trained turns were over ``max_staleness`` and masked, steps with no gradient. A straggler
    holds one unit of the bound until its group closes (attempts end within the task's time limits).

    Raises:
        ValueError: ``max_queued`` < ``groups_per_step`` (the trainer could never get a batch).
    """

    def __init__(self, groups_per_step: int, max_staleness: int, max_queued: int | None = None) -> None:
        self.groups_per_step = groups_per_step
        self.max_queued = max_queued or groups_per_step * max(1, max_staleness)
        if self.max_queued < groups_per_step:
            raise ValueError(
                f"max_queued_groups={max_queued} < groups_per_step={groups_per_step}: the trainer could never "
                "get a batch; allow at least one step's groups"
            )
        self.items: list[tuple[int, Group]] = []  # (group id, group)
        self._added = asyncio.Event()
        self._changed = asyncio.Event()  # a batch was taken or a group closed: room may have appeared

    def __len__(self) -> int:
        return len(self.items)

    def group_ids(self) -> list[int]:
        """Ids of the queued groups (a checkpoint's cursor re-issues them on resume)."""
        return [gid for gid, _ in self.items]

    async def wait_for_room(self, scheduler: GroupScheduler) -> None:
        """Return once ``scheduler`` may issue its next slot (a worker calls it before starting an attempt).

        Attempts of an open group always may (holding them back would only delay groups already counted);
        a new group may open while fewer than ``max_queued`` groups are queued or sampling.
        """
        while scheduler.opens_group() and len(self.items) + scheduler.open_groups >= self.max_queued:
            self._changed.clear()
            await self._changed.wait()

    def put(self, group_id: int, group: Group) -> None:
        self.items.append((group_id, group))
        self._added.set()

    def closed_without_training(self) -> None:
        """A group closed as zero-signal or lost: it no longer counts against the bound."""
        self._changed.set()

    async def take(self, deadline: float | None) -> list[Group] | None:
        """The oldest ``groups_per_step`` groups once that many wait; None when ``deadline`` (loop time) passes first."""
        while len(self.items) < self.groups_per_step:
            self._added.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._added.wait()
            except TimeoutError:
                return None
        got, self.items = self.items[: self.groups_per_step], self.items[self.groups_per_step :]
        self._changed.set()
        return [group for _, group in got]
