"""The Ray backend's actors: rollout workers and trainer workers, plus the default builders of their parts.

Actors build their own parts (sandbox backend, engine, tokenizer, graders, trainer) from a picklable
builder, so nothing that holds threads, processes or a model crosses the wire. Both classes are plain
Python; ``ray_backend`` wraps them with ``ray.remote`` and the placement's resources.

    RolloutWorker(build_rollout, index, ...)      async actor: many attempts at once, each
        .attempt(slot, retries, version[, url])      fork sandbox → harness → grade (``scored_attempt``), on its
                                                     own engine or on the engine server at ``url``
        .update_weights(state, version)             its own engine loads new weights between turns
    TrainerWorker(build_trainer, rank, world_size)  one per trainer process (FSDP2 rank when > 1)
        .setup(master_addr, port) → .train_step(groups) → .state_dict() (rank 0) → .save_checkpoint(...)
        .join_weight_group(...) → .broadcast_weights() / .save_weights(dir, version)   (engine servers)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fireflash.engines.config import EngineConfig
from fireflash.harness.config import HarnessConfig
from fireflash.protocols import Engine, Grader, SandboxBackend, Task
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import AttemptOutcome, ParentPool, scored_attempt
from fireflash.runtime.groups import Slot
from fireflash.runtime.local import BusyMeter, MeteredEngine
from fireflash.runtime.server_weights import TrainerWeightSender, save_weights
from fireflash.runtime.servers import connect_engine
from fireflash.sandbox.config import SandboxConfig
from fireflash.training.config import TrainerConfig


@dataclass
class RolloutParts:
    """What one rollout worker runs attempts with (built inside the worker's process).

    ``engine``: the worker's own in-process engine, or None when attempts go to engine servers, whose clients
    ``connect(url)`` builds.
    """

    backend: SandboxBackend
    engine: Engine | None
    tokenizer: Any
    grader_for: Callable[[Task], Grader]
    connect: Callable[[str], Engine] | None = None


class EngineBehind(RuntimeError):
    """A worker was asked for an attempt on newer weights than its engine holds (it restarted unnoticed)."""


RolloutBuilder = Callable[[int], RolloutParts]
"""``build(worker_index) → RolloutParts``; must be picklable (a module-level function or a partial of one)."""

TrainerBuilder = Callable[[int, int], Any]
"""``build(rank, world_size) → Trainer``; called after MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE are set."""


def _set_threads(num_cpus: float) -> None:
    import torch

    # the actor's CPU reservation is its thread budget: the Ray analogue of the local threads_per_role
    torch.set_num_threads(max(1, int(num_cpus)))


class RolloutWorker:
    """Runs attempts concurrently on one event loop; holds (or calls) one engine. A Ray async actor.

    Args:
        build: builds this worker's parts from its index.
        index: the worker's index among the rollout workers (passed to ``build``).
        harness: the agent loop's limits and sampling.
        hang_margin_sec: see ``scored_attempt``.
        num_cpus: the worker's Ray CPU reservation (its torch thread budget).
    """

    def __init__(
        self, build: RolloutBuilder, index: int, harness: HarnessConfig, hang_margin_sec: float, num_cpus: float
    ) -> None:
        _set_threads(num_cpus)
        self.parts = build(index)
        self.meter = BusyMeter()  # engine busy time seen from this worker, over its own engine or every server
        self.engine = MeteredEngine(self.parts.engine, self.meter) if self.parts.engine is not None else None
        self.servers: dict[str, MeteredEngine] = {}  # clients of engine servers, by URL
        self.parents = ParentPool(self.parts.backend)
        self.index, self.harness, self.hang_margin_sec = index, harness, hang_margin_sec

    async def ping(self) -> int:
        """This incarnation's process id (changes when Ray restarts the worker)."""
        return os.getpid()

    async def attempt(
        self, slot: Slot, max_retries: int, min_weight_version: int, engine_url: str | None = None
    ) -> AttemptOutcome:
        """One scored attempt with up to ``max_retries`` retries (never raises for infrastructure failures).

        ``engine_url``: sample on that engine server instead of this worker's own engine (the server reports
        the weight version of every result; ``min_weight_version`` is not checked). The trajectory's metadata
        records which worker process (``rollout_worker``) and which server (``engine_url``) ran it.

        Raises:
            EngineBehind: the worker's own engine holds weights older than ``min_weight_version``, the newest the
                driver published; the driver sends them and asks again.
            ValueError: no engine to run on (a server URL for a worker without ``connect``, or none for one
                without its own engine).
        """
        p = self.parts
        if engine_url is not None:
            if p.connect is None:
                raise ValueError(f"rollout worker {self.index} was built without connect(url); cannot use {engine_url}")
            if engine_url not in self.servers:
                self.servers[engine_url] = MeteredEngine(p.connect(engine_url), self.meter)
            engine = self.servers[engine_url]
        elif self.engine is None:
            raise ValueError(f"rollout worker {self.index} has no engine of its own: pass the engine server's URL")
        else:
            engine = self.engine
            if engine.weight_version < min_weight_version:
                raise EngineBehind(f"engine holds weight version {engine.weight_version} < {min_weight_version}")
        outcome = await scored_attempt(
            slot.task, lambda: self.parents.get(slot.task), engine, p.tokenizer, self.harness,
            p.grader_for(slot.task), slot.attempt_id, max_retries, self.hang_margin_sec,
        )
        if outcome.trajectory is not None:
            outcome.trajectory.metadata["rollout_worker"] = {"index": self.index, "pid": os.getpid()}
            if engine_url is not None:
                outcome.trajectory.metadata["engine_url"] = engine_url
        return outcome

    async def forget_server(self, url: str) -> None:
        """Close the client of a server that died or moved."""
        client = self.servers.pop(url, None)
        close = getattr(client.engine, "close", None) if client is not None else None
        if close is not None:
            await close()

    async def update_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Load new weights into the worker's own engine; in-flight attempts continue, their next turns use
        ``version``."""
        assert self.engine is not None, "engine servers get their weights from the trainer, not through workers"
        await self.engine.update_weights(weights, version)

    async def engine_busy_sec(self) -> tuple[int, float]:
        """(process id, seconds this worker has had an engine request in flight since this incarnation started)."""
        return os.getpid(), self.meter.busy_sec

    async def close(self) -> None:
        """Close the sandbox backend (parents and forks), the engine's own resources and server clients."""
        await self.parts.backend.close()
        for url in list(self.servers):
            await self.forget_server(url)
        close = getattr(self.parts.engine, "close", None)
        if close is not None:
            await close()


class TrainerWorker:
    """One trainer process. Rank 0's metrics and weights stand for the group (FSDP2 ranks agree on both).

    Args:
        build: builds the trainer for (rank, world_size) once the rendezvous variables are set.
        rank / world_size: this worker's place among ``runtime.ray.num_trainer_workers``.
        num_cpus: the worker's Ray CPU reservation (its torch thread budget).
    """

    def __init__(self, build: TrainerBuilder, rank: int, world_size: int, num_cpus: float) -> None:
        _set_threads(num_cpus)
        self.build, self.rank, self.world_size = build, rank, world_size
        self.trainer: Any = None
        self.sender = TrainerWeightSender()  # rank 0's end of the weight-update group with engine servers

    def address(self) -> tuple[str, int]:
        """(node IP, a free port) for the process group's rendezvous (asked of rank 0)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), s.getsockname()[1]

    def setup(self, master_addr: str, master_port: int) -> tuple[int, int]:
        """Set the torch.distributed rendezvous variables and build the trainer; returns (step, version).

        With several ranks every worker's ``setup`` must run at once (the builder joins the group).
        """
        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(self.rank),
                          WORLD_SIZE=str(self.world_size), LOCAL_RANK="0")
        self.trainer = self.build(self.rank, self.world_size)
        return self.progress()

    def progress(self) -> tuple[int, int]:
        return self.trainer.step, self.trainer.weight_version

    def restore(self, root: str) -> dict[str, Any]:
        """Optimizer, RNG, step and version from the latest checkpoint under ``root``; returns its cursor."""
        return self.trainer.restore(Path(root))

    def train_step(self, groups: list[Any]) -> tuple[dict[str, float], int, int]:
        """One optimizer step (stale turns masked by the trainer); returns (metrics, step, version)."""
        metrics = self.trainer.train_step(groups)
        return metrics, self.trainer.step, self.trainer.weight_version

    def state_dict(self) -> dict[str, Any] | None:
        """The new weights for the engines from rank 0 (Ray stores them in the object store once); None elsewhere.

        Every rank calls the trainer's ``state_dict``: a sharded trainer gathers the full weights collectively.
        """
        state = self.trainer.state_dict()
        return state if self.rank == 0 else None

    def save_checkpoint(self, root: str, cursor: dict[str, Any]) -> str:
        return str(self.trainer.save_checkpoint(Path(root), cursor))

    # ---- engine servers (RECIPE.md §1: new weights after every step) ----

    def join_weight_group(
        self, address: str, port: int, world_size: int, backend: str, group_name: str, timeout_sec: float,
        protocol: str = "sglang",
    ) -> None:
        """Rank 0: create the weight-update group with the engine servers (blocks until they have joined);
        ``protocol``: the servers' kind, 'sglang' or 'vllm' (``TrainerWeightSender.join``)."""
        if self.rank == 0:
            self.sender.join(address, port, world_size, backend, group_name, timeout_sec, protocol)

    def weight_specs(self) -> list[Any] | None:
        """(name, dtype, shape) of every tensor rank 0 sends; None on other ranks. Collective."""
        state = self.trainer.state_dict()
        return self.sender.specs(state) if self.rank == 0 else None

    def broadcast_weights(self) -> None:
        """Rank 0 sends the current weights through the group while the servers receive them. Collective."""
        state = self.trainer.state_dict()
        self.sender.broadcast(state if self.rank == 0 else {})

    def save_weights(self, root: str, version: int) -> str | None:
        """Rank 0 writes the current weights as an HF directory under ``root``; returns it (None elsewhere).
        Collective."""
        state = self.trainer.state_dict()
        if self.rank != 0:
            return None
        return str(save_weights(self.trainer.model, self.trainer.tokenizer, state, Path(root), version))


def build_rollout_parts(
    index: int, *, engine: EngineConfig, model_dir: str, sandbox: SandboxConfig, cache_dir: str | None, num_cpus: float,
) -> RolloutParts:
    """The default rollout builder for ``fireflash train`` (use with ``functools.partial``).

    An in-process engine ('local') gets the worker's CPU reservation as its thread budget unless
    ``engine.num_threads`` is set; for server engines ('sglang') the worker holds none and builds a client per
    server URL the driver routes attempts to. Every worker builds each task's grader once.
    """
    from fireflash.engines import make_engine
    from fireflash.grading import make_grader
    from fireflash.models import load_tokenizer
    from fireflash.sandbox import make_backend

    if engine.num_threads is None:
        engine = engine.model_copy(update={"num_threads": max(1, int(num_cpus))})
    graders: dict[str, Grader] = {}

    def grader_for(task: Task) -> Grader:
        if task.id not in graders:
            graders[task.id] = make_grader(task.grader)
        return graders[task.id]

    servers = engine.kind in ("sglang", "vllm")
    return RolloutParts(
        backend=make_backend(sandbox), engine=None if servers else make_engine(engine, model_dir, cache_dir=cache_dir),
        tokenizer=load_tokenizer(model_dir, cache_dir), grader_for=grader_for,
        connect=partial(connect_engine, engine) if servers else None,
    )


def build_trainer(
    rank: int, world_size: int, *, model_dir: str, tokenizer_dir: str, training: TrainerConfig,
    objective: ObjectiveConfig, temperature: float, cache_dir: str | None,
) -> Any:
    """The default trainer builder for ``fireflash train`` (use with ``functools.partial``).

    One worker: the single-process ``Trainer``. Several: this rank of the FSDP2 trainer
    (``fireflash.training.fsdp``), joining the group at MASTER_ADDR / MASTER_PORT that ``TrainerWorker.setup``
    set; Ray gives each worker its own GPU, so its local device index is 0.
    """
    from fireflash.models import load_policy, load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir, cache_dir)
    if world_size > 1:
        from fireflash.models import resolve_model_dir
        from fireflash.training.fsdp import build_fsdp_trainer

        return build_fsdp_trainer(
            str(resolve_model_dir(model_dir, cache_dir)), training, objective, temperature, rank=rank,
            world_size=world_size, master_addr=os.environ["MASTER_ADDR"], master_port=int(os.environ["MASTER_PORT"]),
            local_rank=0, tokenizer=tokenizer, sharded_checkpoints=training.sharded_checkpoints,
        )
    from fireflash.training.trainer import Trainer, default_device

    return Trainer(
        load_policy(model_dir, cache_dir), tokenizer, training, objective, temperature=temperature,
        device=default_device(),
    )
