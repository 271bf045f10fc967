"""The driver's view of the Ray rollout workers, and the in-process engines' weights through the object store.

    trainer rank 0's state dict → ray.put → WeightPublisher.publish → every live RolloutWorker.update_weights
    a restarted worker (version -1) → WeightPublisher.catch_up before its next attempt

Used by ``RayRuntime`` (ray_backend.py) when the engines live in the rollout workers; large models use engine
servers instead (server_fleet.py), since a full state dict per step through the object store suits small ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class WorkersLost(RuntimeError):
    """Every rollout worker died for good (its restarts spent, or it could not be built)."""


@dataclass
class WorkerView:
    """The driver's view of one rollout worker actor."""

    handle: Any
    index: int
    pid: int = 0  # process id of the incarnation last seen; a new one means Ray restarted it
    version: int = 0  # weight version its engine holds; -1 after a restart
    inflight: int = 0
    alive: bool = True
    restarts: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class WeightPublisher:
    """Trainer rank 0 → every rollout worker: one state dict in the object store, then a version bump.

    Keeps the newest weights' reference so that a restarted worker catches up before its next attempt.
    """

    def __init__(self) -> None:
        self.ref: Any = None
        self.version = 0

    async def publish(
        self, trainers: Sequence[Any], workers: Sequence[WorkerView], version: int
    ) -> list[tuple[WorkerView, BaseException]]:
        """Send rank 0's weights as ``version`` to every live worker; returns the workers that died meanwhile."""
        refs = [t.state_dict.remote() for t in trainers]  # every rank: a sharded trainer gathers collectively
        self.ref, self.version = refs[0], version
        live = [w for w in workers if w.alive]
        results = await asyncio.gather(*(self.catch_up(w) for w in live), return_exceptions=True)
        await asyncio.gather(*refs[1:])
        return _actor_failures(live, results)

    async def catch_up(self, w: WorkerView) -> None:
        """Bring ``w``'s engine to the newest published version (nothing when it has it already)."""
        async with w.lock:
            if self.ref is not None and w.alive and w.version != self.version:
                await w.handle.update_weights.remote(self.ref, self.version)
                w.version = self.version


def _actor_failures(workers: Sequence[WorkerView], results: Sequence[Any]) -> list[tuple[WorkerView, BaseException]]:
    """Pairs of (worker, actor error) from gathered results; any other exception is a bug and is raised."""
    from ray.exceptions import RayActorError

    failed = []
    for w, r in zip(workers, results):
        if isinstance(r, RayActorError):
            failed.append((w, r))
        elif isinstance(r, BaseException):
            raise r
    return failed


async def ping_until_back(w: WorkerView, timeout_sec: float) -> int | None:
    """``w``'s process id once it answers, or None if it died for good (or stayed away too long)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError

    try:
        async with asyncio.timeout(timeout_sec):
            while True:
                try:
                    return await w.handle.ping.remote()
                except ActorUnavailableError:  # restarting: Ray answers this until the new process is up
                    await asyncio.sleep(0.2)
    except (ActorDiedError, TimeoutError):  # died with no restart left (or its constructor failed)
        return None
