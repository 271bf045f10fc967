"""The asynchronous RL loop on Ray: LocalRuntime's roles as actors, the path to many machines (RECIPE.md §1).

    driver (RayRuntime, asyncio)                         actors (ray_actors.py)
      GroupScheduler → slot ───────────────►  RolloutWorker × N: fork sandbox → harness → grade
      finish_group ◄── AttemptOutcome ──────    (max_inflight_attempts spread over the workers)
      complete groups → ray.put ───────────►  TrainerWorker × W: train_step (stale turns masked)
      in-process engines: WeightPublisher: rank 0's state dict → object store → every RolloutWorker.update_weights
      engine servers (server_fleet.py): EngineServerWorker × E; each attempt goes to the least-loaded healthy server;
        ServerWeightSync: trainer rank 0 ══ weight-update group (or an HF directory) ══► every server, version + 1

The semantics are the local backend's, from the same code: the loop is ``runtime.loop.RLLoop`` (slots, steps,
wall limit, checkpoints, metrics rows) with ``RayRuntime`` as its ``LoopHooks`` (attempts on rollout actors,
steps on trainer actors, weights through the object store or a weight-update group); ``scored_attempt``
retries infrastructure failures inside a worker, ``finish_group`` turns outcomes into advantages or drops
zero-signal / lost groups, the ``Trainer`` masks stale turns. The driver keeps ``max_inflight_attempts``
attempt calls running whatever the trainer does (rollouts never wait for it), and sends new weights after
each step while those attempts go on (their next turns use the new version). A rollout worker that dies
costs its in-flight attempts one try each: Ray restarts it (up to ``max_worker_restarts``), the driver
retries the attempts (on any live worker) and sends the restarted worker the newest weights before its
first attempt. Metrics rows are the loop's, so ``fireflash report`` reads a Ray run like a local one.

With engine servers the rollout workers hold no engine: routing, weight pushes and recovery are
``server_fleet.ServerFleet``'s.

Simplifications, named: the trainer role is not restarted (a dead trainer ends the run; ``--resume``
continues from the last checkpoint); the in-process publisher ships full state dicts through the object
store, which suits small models — large ones use engine servers; run_dir must be on storage every node sees.

    runtime = RayRuntime(tasks=..., build_rollout=..., build_trainer=..., placement=plan_placement(...), ...)
    history = asyncio.run(runtime.run())      # ray.init(...) first
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fireflash.curation.config import CurationConfig
from fireflash.harness.config import HarnessConfig
from fireflash.protocols import Group, Task
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import AttemptOutcome, error_info
from fireflash.runtime.groups import Slot
from fireflash.runtime.loop import LoopStateView, RLLoop
from fireflash.runtime.placement import Placement, PlacementError
from fireflash.runtime.ray_actors import (
    EngineBehind,
    RolloutBuilder,
    RolloutWorker,
    TrainerBuilder,
    TrainerWorker,
)
from fireflash.runtime.ray_workers import WeightPublisher, WorkersLost, WorkerView, ping_until_back
from fireflash.runtime.server_fleet import EngineServer, ServerFleet
from fireflash.runtime.server_weights import ServerWeightSync
from fireflash.runtime.servers import EngineServerWorker, EnginesLost, ServerBuilder, ServerClient
from fireflash.tracking import MetricsWriter


class RayUnavailable(RuntimeError):
    """``runtime.backend = "ray"`` but Ray is not installed."""


@dataclass
class TrainerProgress:
    """The trainer's step and weight version as the driver last saw them (read by the live view)."""

    step: int = 0
    weight_version: int = 0



class RayRuntime(LoopStateView):
    """Runs ``steps`` optimizer steps of asynchronous GRPO with Ray actors (RECIPE.md §1, §5).

    Ray must be initialised (``ray.init``) by the caller. The runtime starts its actors in ``run`` and
    kills them when it returns. Builders are picklable callables run inside the actors (STYLE.md 15:
    flat arguments, no config tree): ``build_rollout(index) → RolloutParts``, ``build_trainer(rank,
    world_size) → Trainer``.

    Args:
        placement: ``plan_placement(...)``: how many actors of each role, with which resources.
        resume: restore the trainer from ``run_dir/checkpoints`` and continue its cursor.
        build_server: for engine servers (``placement.engines_in_workers`` False): starts server i inside its
            actor (``servers.ServerBuilder``, e.g. ``servers.launch_engine_server``); Ray restarts it when it dies.
        engine_urls: instead of ``build_server``, servers started elsewhere (used as they are, never restarted).
        connect_server: ``url → client`` (``SGLangEngine``, ``VLLMEngine``) the driver pushes weights through.
        weight_sync: 'collective' (one broadcast from trainer rank 0 through a weight-update group: NCCL on GPUs,
            gloo on CPU) or 'disk' (an HF directory under ``run_dir/weights`` that every server loads).
        weight_sync_timeout_sec: a server that does not join the group, or a transfer that stalls, fails after this.
        engine_start_timeout_sec: how long a launched server may take to answer, at start and after a restart.
        Others: as ``LocalRuntime``.
    """

    def __init__(
        self,
        *,
        tasks: Sequence[Task],
        build_rollout: RolloutBuilder,
        build_trainer: TrainerBuilder,
        placement: Placement,
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
        max_worker_restarts: int = 3,
        worker_start_timeout_sec: float = 300.0,
        mode: Literal["async", "sync"] = "async",
        hang_margin_sec: float = 60.0,
        max_wall_sec: float | None = None,
        checkpoint_every_steps: int = 1,
        resume: bool = False,
        writer: MetricsWriter | None = None,
        save_trajectories: bool = True,
        max_queued_groups: int | None = None,
        build_server: ServerBuilder | None = None,
        engine_urls: Sequence[str] = (),
        connect_server: ServerClient | None = None,
        weight_sync: Literal["collective", "disk"] = "collective",
        weight_sync_timeout_sec: float = 300.0,
        engine_start_timeout_sec: float = 900.0,
        curation: CurationConfig | None = None,
        probe_seed: Sequence[tuple[str, int, int, float]] = (),
        mix: Mapping[str, float] | None = None,
    ) -> None:
        if not placement.engines_in_workers and connect_server is None:
            raise ValueError("engine servers need connect_server (url → client) to push weights to them")
        if not placement.engines_in_workers and build_server is None and not engine_urls:
            raise ValueError("engine servers need build_server (FireFlash launches them) or engine_urls (started elsewhere)")
        self.build_rollout, self.build_trainer, self.placement = build_rollout, build_trainer, placement
        self.harness, self.run_dir, self.steps = harness, Path(run_dir).resolve(), steps
        self.max_retries = max_attempt_retries
        self.max_restarts, self.start_timeout_sec = max_worker_restarts, worker_start_timeout_sec
        self.hang_margin_sec = hang_margin_sec
        self.resume = resume
        # the scheduler is set in _start (loop.load_cursor), once a resume's cursor is known
        self.loop = RLLoop(
            self, tasks=tasks, group_size=group_size, seed=seed, objective=objective, run_dir=self.run_dir, steps=steps,
            groups_per_step=groups_per_step, max_inflight_attempts=max_inflight_attempts,
            discard_zero_signal_groups=discard_zero_signal_groups, mode=mode, max_wall_sec=max_wall_sec,
            checkpoint_every_steps=checkpoint_every_steps, writer=writer, save_trajectories=save_trajectories,
            max_queued_groups=max_queued_groups, curation=curation, probe_seed=probe_seed, mix=mix,
        )
        self.trainer = TrainerProgress()
        self.workers: list[WorkerView] = []
        self.trainers: list[Any] = []
        self.publisher = WeightPublisher()
        self.actor_errors = 0  # attempt tries lost to dead rollout workers, whole run
        self.build_server, self.engine_urls = build_server, list(engine_urls)
        server_sync: ServerWeightSync | None = None
        if not placement.engines_in_workers:
            assert connect_server is not None
            server_sync = ServerWeightSync(
                weight_sync, connect_server, ranks_per_server=max(placement.gpus_per_engine, 1),
                backend="nccl" if placement.gpus_per_engine else "gloo", weights_dir=self.run_dir / "weights",
                timeout_sec=weight_sync_timeout_sec, protocol=placement.engine_kind,
            )
        # engine servers (none when engines live in the workers)
        self.fleet = ServerFleet(
            server_sync, max_restarts=max_worker_restarts, start_timeout_sec=engine_start_timeout_sec,
            version=lambda: self.trainer.weight_version, forget=self._forget_server,
        )
        self.engine_start_timeout_sec = engine_start_timeout_sec
        self._busy_seen: dict[tuple[int, int], float] = {}  # (worker, pid) → engine busy seconds last read
        self._pg: Any = None

    # ---- actors -------------------------------------------------------------------------------------

    async def _start(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        p = self.placement
        have = ray.cluster_resources()
        gpus = float(have.get("GPU", 0))
        launched = 0 if p.engines_in_workers or self.engine_urls else p.engines  # engine servers FireFlash starts
        engine_gpus = p.engine_gpus if p.engines_in_workers or launched else 0
        if p.trainer_gpus + engine_gpus > gpus:
            raise PlacementError(
                f"the placement needs {p.trainer_gpus} trainer GPUs"
                + (f" and {engine_gpus} engine GPUs" if engine_gpus else "")
                + f" but the Ray cluster has {gpus:g}; fix runtime.ray.num_nodes / gpus_per_node"
            )
        cpus = (p.rollout_workers * p.cpus_per_rollout_worker + p.trainer_workers * p.cpus_per_trainer_worker
                + launched * p.cpus_per_engine)
        if cpus > float(have.get("CPU", 0)):
            # Ray would wait for the missing CPUs forever; say so now
            raise PlacementError(
                f"the placement needs {cpus:g} CPUs ({p.rollout_workers} rollout × {p.cpus_per_rollout_worker:g} + "
                f"{p.trainer_workers} trainer × {p.cpus_per_trainer_worker:g}"
                + (f" + {launched} engine servers × {p.cpus_per_engine:g}" if launched else "")
                + f") but the Ray cluster has {float(have.get('CPU', 0)):g}; lower runtime.ray.num_cpus_per_rollout_worker"
                " / num_cpus_per_trainer_worker / num_cpus_per_engine (fractions are allowed) or the worker counts"
            )
        if launched:  # servers take minutes to load: start them before anything else
            server_cls = ray.remote(EngineServerWorker).options(
                num_cpus=p.cpus_per_engine, num_gpus=p.gpus_per_engine, max_restarts=self.max_restarts,
                max_task_retries=0,
            )
            self.fleet.servers = [EngineServer(i, server_cls.remote(self.build_server, i)) for i in range(launched)]
        elif not p.engines_in_workers:
            self.fleet.servers = [EngineServer(i, url=u, state="joining") for i, u in enumerate(self.engine_urls)]
        rollout_gpus = p.gpus_per_engine if p.engines_in_workers else 0
        worker_cls = ray.remote(RolloutWorker).options(
            num_cpus=p.cpus_per_rollout_worker, num_gpus=rollout_gpus, max_restarts=self.max_restarts,
            max_task_retries=0, scheduling_strategy="SPREAD",
        )
        self.workers = [
            WorkerView(worker_cls.remote(self.build_rollout, i, self.harness, self.hang_margin_sec,
                                      p.cpus_per_rollout_worker), i)
            for i in range(p.rollout_workers)
        ]
        # FSDP ranks talk every step: pack them onto as few nodes as possible
        self._pg = placement_group(
            [{"CPU": p.cpus_per_trainer_worker, "GPU": p.gpus_per_trainer_worker}] * p.trainer_workers, strategy="PACK"
        )
        async with asyncio.timeout(self.start_timeout_sec):
            await self._pg.ready()
        trainer_cls = ray.remote(TrainerWorker)
        self.trainers = [
            trainer_cls.options(
                num_cpus=p.cpus_per_trainer_worker, num_gpus=p.gpus_per_trainer_worker,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=rank),
            ).remote(self.build_trainer, rank, p.trainer_workers, p.cpus_per_trainer_worker)
            for rank in range(p.trainer_workers)
        ]
        self.fleet.trainers = self.trainers
        async with asyncio.timeout(self.start_timeout_sec):
            addr, port = await self.trainers[0].address.remote()
            progress = await asyncio.gather(*(t.setup.remote(addr, port) for t in self.trainers))
            pids = await asyncio.gather(*(w.handle.ping.remote() for w in self.workers), return_exceptions=True)
        for w, pid in zip(self.workers, pids):
            if isinstance(pid, BaseException):
                raise WorkersLost(f"rollout worker {w.index} could not start: {pid}") from pid
            w.pid = pid
        launched_servers = [s for s in self.servers if s.handle is not None]
        try:
            async with asyncio.timeout(self.engine_start_timeout_sec):
                infos = await asyncio.gather(*(s.handle.ping.remote() for s in launched_servers), return_exceptions=True)
        except TimeoutError:
            raise EnginesLost(
                f"engine servers did not answer within runtime.ray.engine_start_timeout_sec = "
                f"{self.engine_start_timeout_sec:g} s; raise it for large models (see runs' engines/engine-N.log)"
            ) from None
        for s, info in zip(launched_servers, infos):
            if isinstance(info, BaseException):
                raise EnginesLost(f"engine server {s.index} could not start: {info}") from info
            (s.pid, s.url), s.state = info, "joining"
        self.trainer.step, self.trainer.weight_version = progress[0]
        cursor = None
        if self.resume:
            root = str(self.run_dir / "checkpoints")
            cursor = (await asyncio.gather(*(t.restore.remote(root) for t in self.trainers)))[0]
            self.trainer.step, self.trainer.weight_version = await self.trainers[0].progress.remote()
        self.loop.load_cursor(cursor)
        if self.servers:  # form the weight-update group (and tag a resumed run's weights with their version)
            async with self.fleet.lock:
                await self.fleet.push_weights()
        elif self.trainer.weight_version:  # engines were built from the checkpoint's weights: tag them
            await self._publish()

    async def _publish(self) -> None:
        for w, e in await self.publisher.publish(self.trainers, self.workers, self.trainer.weight_version):
            await self._recover(w, e)

    @property
    def servers(self) -> list[EngineServer]:
        """The engine servers (``fleet.servers``; empty when the engines live in the rollout workers)."""
        return self.fleet.servers

    async def _forget_server(self, url: str) -> None:
        """Every live rollout worker drops its client of the server that was at ``url``."""
        await asyncio.gather(*(w.handle.forget_server.remote(url) for w in self.workers if w.alive),
                             return_exceptions=True)

    async def _recover(self, w: WorkerView, error: BaseException) -> None:
        """After ``w`` failed a call: wait for its restart (newest weights before its next attempt) or retire it."""
        async with w.lock:
            if not w.alive:
                return
            pid = await ping_until_back(w, self.start_timeout_sec)
            if pid is None:
                w.alive = False
                if not any(x.alive for x in self.workers):
                    raise WorkersLost(
                        f"every rollout worker died (runtime.ray.max_worker_restarts = {self.max_restarts} spent); "
                        f"last error: {error}"
                    ) from error
                return
            if pid != w.pid:
                w.pid, w.version, w.restarts = pid, -1, w.restarts + 1

    def _pick(self) -> WorkerView:
        live = [w for w in self.workers if w.alive]
        if not live:
            raise WorkersLost(f"no rollout worker is alive (runtime.ray.max_worker_restarts = {self.max_restarts})")
        return min(live, key=lambda w: (w.inflight, w.index))

    async def engine_busy_sec(self) -> float:
        """Engine busy seconds summed over workers since the run started (restarted workers start at 0)."""
        live = [w for w in self.workers if w.alive]
        results = await asyncio.gather(*(w.handle.engine_busy_sec.remote() for w in live), return_exceptions=True)
        for w, r in zip(live, results):
            if not isinstance(r, BaseException):
                pid, busy = r
                self._busy_seen[(w.index, pid)] = busy
        return sum(self._busy_seen.values())

    async def _stop(self) -> None:
        import ray

        live = [w for w in self.workers if w.alive]
        try:
            async with asyncio.timeout(60):
                await asyncio.gather(*(w.handle.close.remote() for w in live), return_exceptions=True)
        except TimeoutError:
            pass  # killing the actor below ends its sandboxes' processes too
        await self.fleet.close()
        launched = [s.handle for s in self.servers if s.handle is not None]
        try:
            async with asyncio.timeout(60):
                await asyncio.gather(*(h.close.remote() for h in launched), return_exceptions=True)
        except TimeoutError:
            pass  # killing the actor below ends its server process too
        for handle in [w.handle for w in self.workers] + self.trainers + launched:
            ray.kill(handle, no_restart=True)
        if self._pg is not None:
            ray.util.remove_placement_group(self._pg)

    # ---- rollout side -------------------------------------------------------------------------------

    async def attempt(self, slot: Slot) -> AttemptOutcome:
        """``scored_attempt`` on a live worker with the newest weights; a worker's death costs the attempt one try."""
        import ray
        from ray.exceptions import RayActorError

        start, errors = time.perf_counter(), []
        while len(errors) <= self.max_retries:
            # with engine servers the driver retries (each try may go to another server), so the worker tries once;
            # the server first: it may have to wait for one to be up, and the workers' loads change meanwhile
            server = await self.fleet.pick() if self.servers else None
            w = self._pick()
            w.inflight += 1
            if server is not None:
                server.inflight += 1
            try:
                if server is None:
                    await self.publisher.catch_up(w)
                    ref = w.handle.attempt.remote(slot, self.max_retries - len(errors), self.publisher.version)
                else:
                    ref = w.handle.attempt.remote(slot, 0, 0, server.url)
                try:
                    outcome: AttemptOutcome = await ref
                except asyncio.CancelledError:
                    ray.cancel(ref)  # the worker's scored_attempt closes its sandbox
                    raise
            except EngineBehind as e:  # restarted before a failed call told the driver: catch it up, no try lost
                await self._recover(w, e)
                w.version = -1
                continue
            except RayActorError as e:
                errors.append(error_info(e))
                self.actor_errors += 1
                await self._recover(w, e)
                continue
            finally:
                w.inflight -= 1
                if server is not None:
                    server.inflight -= 1
            if server is not None and outcome.lost:  # the try failed: was it the server?
                errors.extend(outcome.errors)
                await self.fleet.check(server)
                continue
            outcome.tries += len(errors)
            outcome.errors[:0] = errors
            return outcome
        duration = time.perf_counter() - start
        return AttemptOutcome(slot.task.id, slot.attempt_id, None, None, len(errors), errors, duration)

    # ---- training side: loop.LoopHooks ----------------------------------------------------------------

    async def train_step(self, groups: list[Group]) -> dict[str, float]:
        import ray

        groups_ref = ray.put(groups)  # one copy in the object store, read by every trainer rank
        # with engine servers, the lock: a recovering server's catch-up never sends the weights of a step still
        # running (the driver would tag them with the version before it); after the step it sends the new ones
        async with self.fleet.lock if self.servers else contextlib.nullcontext():
            results = await asyncio.gather(*(t.train_step.remote(groups_ref) for t in self.trainers))
            metrics, self.trainer.step, self.trainer.weight_version = results[0]
        return metrics

    async def publish_weights(self) -> None:
        if self.servers:
            async with self.fleet.lock:
                await self.fleet.push_weights()
        else:
            await self._publish()

    async def save_checkpoint(self, cursor: dict[str, Any]) -> None:
        root = str(self.run_dir / "checkpoints")
        await asyncio.gather(*(t.save_checkpoint.remote(root, cursor) for t in self.trainers))

    def engine_count(self) -> int:
        return max(sum(w.alive for w in self.workers), 1)

    def extra_metrics(self) -> dict[str, float]:
        return {
            "rollout/worker_restarts": float(sum(w.restarts for w in self.workers)),
            "rollout/workers_alive": float(sum(w.alive for w in self.workers)),
            "rollout/tries_lost_to_dead_workers": float(self.actor_errors),
            **({"engines/up": float(sum(s.state == "up" for s in self.servers)),
                "engines/restarts": float(sum(s.restarts for s in self.servers))} if self.servers else {}),
        }

    @property
    def step(self) -> int:
        return self.trainer.step

    @property
    def weight_version(self) -> int:
        return self.trainer.weight_version

    async def run(self) -> list[dict[str, float]]:
        """Start the actors, run until ``steps`` optimizer steps are done, stop the actors; returns each step's metrics.

        Raises:
            PlacementError: the cluster lacks the GPUs the placement needs.
            WorkersLost: every rollout worker died for good.
            EnginesLost: every engine server died for good (or none started).
            ray.exceptions.RayError: a trainer worker failed (resume from the last checkpoint).
        """
        try:
            await self._start()
            return await self.loop.run()
        finally:
            await self._stop()
