"""The driver's engine servers on the Ray backend: their states, routing, weight pushes and recovery (RECIPE.md §1).

    EngineServer × E: starting → joining → up ⇄ down → joining … → dead (restarts spent, or recovery failed)
      pick(): the 'up' server with the fewest attempts in flight (waits while none is up)
      push_weights(): every 'up' or 'joining' server pinged, then one weight-update group and one broadcast
        (server_weights.ServerWeightSync); a member that fails is dropped and the group formed anew
      check(s) after a lost attempt: a dead or restarted server goes 'down' and is recovered in the background:
        wait for Ray to restart its actor, rejoin, catch up, 'up' again

With engine servers (``build_server``, or ``engine_urls`` of servers started elsewhere) the rollout workers
hold no engine: each attempt is routed to the healthy server with the fewest attempts in flight and the
worker samples through that server's client. After every step the trainer ranks push the new weights to every
server (``ServerWeightSync``: one broadcast from rank 0 through a weight-update group, or an HF directory the
servers load), and each result carries the version the server reports. A server that dies costs its in-flight
attempts one try each (retried on another server, or on it once it is back): Ray restarts its actor (up to
``max_worker_restarts``), which launches the server again; the driver forms a new weight-update group with it
and sends it the newest weights before it gets attempts again.

``RayRuntime`` (ray_backend.py) owns one ``ServerFleet``; with engines inside the rollout workers it has no servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fireflash.runtime.server_weights import ServerWeightSync
from fireflash.runtime.servers import EnginesLost

ServerState = Literal["starting", "joining", "up", "down", "dead"]


@dataclass
class EngineServer:
    """The driver's view of one engine server (an actor, or an external URL when ``handle`` is None).

    ``state``: 'starting' (launching), 'joining' (up, not yet holding the newest weights), 'up' (gets attempts),
    'down' (died or restarted; being recovered), 'dead' (its restarts spent, or its recovery failed).
    """

    index: int
    handle: Any = None
    url: str = ""
    pid: int = 0
    state: ServerState = "starting"
    inflight: int = 0
    restarts: int = 0
    synced_version: int = -1  # the trainer's weight version this server last took (-1: none yet)



class ServerFleet:
    """The driver's view of every engine server, and the one lock on the weight-update group.

    Args:
        sync: the weight pushes (None when the engines live in the rollout workers: then ``servers`` stays empty).
        max_restarts: ``runtime.ray.max_worker_restarts`` (named in ``EnginesLost``).
        start_timeout_sec: how long a restarted server may take to answer (``runtime.ray.engine_start_timeout_sec``).
        version: the trainer's current weight version.
        forget: tells every live rollout worker to drop its client of a server URL (the server moved or died).
    """

    def __init__(
        self,
        sync: ServerWeightSync | None,
        *,
        max_restarts: int,
        start_timeout_sec: float,
        version: Callable[[], int],
        forget: Callable[[str], Awaitable[Any]],
    ) -> None:
        self.sync, self.max_restarts, self.start_timeout_sec = sync, max_restarts, start_timeout_sec
        self.version, self.forget = version, forget
        self.servers: list[EngineServer] = []  # none when engines live in the workers
        self.trainers: Sequence[Any] = []  # the trainer actors, set once they are started
        self.changed = asyncio.Condition()  # a server went up, down or dead
        self.lock = asyncio.Lock()  # one weight-update group operation at a time
        self.recoveries: set[asyncio.Task[None]] = set()
        self.errors: list[tuple[int, str]] = []  # (server index, why it is out for good)

    async def close(self) -> None:
        """Cancel the recoveries still running and close every control client."""
        for task in self.recoveries:
            task.cancel()
        if self.sync is not None:
            await self.sync.close()

    async def set_state(self, s: EngineServer, state: ServerState) -> None:
        s.state = state
        async with self.changed:
            self.changed.notify_all()

    async def push_weights(self) -> None:
        """Push the trainer's current weights, tagged with its version, to every server that is up or rejoining.

        Call with ``lock`` held: the trainer takes no step meanwhile, so the weights sent are the version's.
        Members are pinged first; one that fails during the update is dropped (and recovered in the background)
        and the group is formed anew without it. Servers that took the update are 'up' (they get attempts).

        Raises:
            EnginesLost: every server died for good.
            Exception: the update failed ``len(servers) + 1`` times with every member answering pings (the last error).
        """
        assert self.sync is not None and self.lock.locked()
        last: Exception | None = None
        for _ in range(len(self.servers) + 1):
            for s in [s for s in self.servers if s.state in ("up", "joining")]:
                await self.check(s)
            members = [s for s in self.servers if s.state in ("up", "joining")]
            if not members:
                if all(s.state == "dead" for s in self.servers):
                    raise EnginesLost(self.lost_message())
                return  # they are restarting; each one syncs itself when it is back
            if all(s.state == "up" and s.synced_version == self.version() for s in members):
                return  # a recovery between the step and its publish already sent these weights to every member
            urls = [s.url for s in members]
            try:
                await self.sync.join(self.trainers, urls)
                await self.sync.publish(self.trainers, urls, self.version())
            except Exception as e:  # noqa: BLE001 - a member died mid-update: find it, drop it, try again
                last = e
                self.sync.reset()
                continue
            for s in members:
                s.synced_version = self.version()
                if s.state == "joining":
                    await self.set_state(s, "up")
            return
        assert last is not None
        raise last

    def lost_message(self) -> str:
        """``EnginesLost``'s message: each dead server's reason, or that the restarts are spent."""
        why = "; ".join(f"server {i}: {e}" for i, e in self.errors) or "their restarts are spent"
        return f"every engine server died (runtime.ray.max_worker_restarts = {self.max_restarts}): {why}"

    async def check(self, s: EngineServer) -> None:
        """Ping ``s``; if it died or was restarted, mark it down and recover it in the background."""
        from ray.exceptions import RayActorError

        if s.handle is None or s.state in ("down", "dead"):
            return  # an external server is not managed; a down one is already being recovered
        known = s.pid
        try:
            async with asyncio.timeout(30):
                pid, _ = await s.handle.ping.remote()
        except (RayActorError, TimeoutError):
            pid = -1
        # several failed attempts check at once: only the first to see the change recovers the server
        if pid == known or s.pid != known or s.state in ("down", "dead"):
            return
        await self.set_state(s, "down")
        task = asyncio.create_task(self._recover(s))
        self.recoveries.add(task)
        task.add_done_callback(self.recoveries.discard)

    async def _recover(self, s: EngineServer) -> None:
        """Wait for Ray to restart ``s`` (its actor launches the server again), then rejoin and catch it up.

        A server that does not come back within ``engine_start_timeout_sec``, or whose recovery fails in any other
        way, is 'dead' and the error is kept for the message ``EnginesLost`` gives once none is left.
        """
        from ray.exceptions import ActorUnavailableError

        assert self.sync is not None
        try:
            old = s.url
            await self.sync.forget(old)
            await self.forget(old)
            try:
                async with asyncio.timeout(self.start_timeout_sec):
                    while True:
                        try:
                            pid, url = await s.handle.ping.remote()
                            break
                        except ActorUnavailableError:  # restarting
                            await asyncio.sleep(0.5)
            except TimeoutError:
                raise TimeoutError(
                    f"not back within runtime.ray.engine_start_timeout_sec = {self.start_timeout_sec:g} s"
                ) from None
            if pid != s.pid:  # a ping that timed out on a live server brings back the same process
                s.restarts += 1
            s.pid, s.url = pid, url
            await self.set_state(s, "joining")
            backoff = 1.0
            while s.state == "joining":  # until it took an update, or died again (then another recovery runs)
                try:
                    async with self.lock:
                        await self.push_weights()
                except EnginesLost:
                    raise
                except Exception:  # noqa: BLE001 - every member answers but the update failed: wait, try again
                    await asyncio.sleep(backoff)
                    backoff = min(2 * backoff, 30.0)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - out for good (ActorDiedError included); EnginesLost says why if none is left
            self.errors.append((s.index, f"{type(e).__name__}: {e}"))
            await self.set_state(s, "dead")

    async def pick(self) -> EngineServer:
        """The 'up' server with the fewest attempts in flight; waits while none is up.

        Raises:
            EnginesLost: every server died for good.
        """
        async with self.changed:
            await self.changed.wait_for(
                lambda: any(s.state == "up" for s in self.servers) or all(s.state == "dead" for s in self.servers)
            )
        up = [s for s in self.servers if s.state == "up"]
        if not up:
            raise EnginesLost(self.lost_message())
        return min(up, key=lambda s: (s.inflight, s.index))
