"""Rollout engines as servers on the Ray backend: SGLang (or FireFlash's own) processes in actors, and their weight sync.

    EngineServerWorker × E (Ray actor, gpus_per_engine GPUs)        RayRuntime (driver)
      build_server(index) → RunningServer: a process, its URL  ───►   each attempt goes to the healthy server with
      ping() → (pid, url); exits when its server process died,         the fewest attempts in flight; a server that
        so Ray restarts the actor and the server with it               fails is pinged, waited for, re-joined and
                                                                        caught up before it gets attempts again
      trainer rank 0 ══ weight-update group (NCCL, gloo on CPU) ══►   ServerWeightSync, after every optimizer step:
                                                                        'collective': rank 0 broadcasts each tensor
                                                                          once while every server receives it
                                                                        'disk': rank 0 saves an HF directory, every
                                                                          server loads it (/update_weights_from_disk)

RECIPE.md §1: the trainer pushes new weights to the inference engines after every step (reference: NCCL) and
in-flight attempts continue; each result carries the version the server reports. A state dict that fits one
bucket (``engine.weight_sync_bucket_mb``) goes in one call and no pause is sent: SGLang takes an update once the
requests it is sampling have finished (its model-update lock) and holds new ones until it is done, so every turn is
sampled by one version, and the trainer's broadcast waits meanwhile — so ``engine.weight_sync_timeout_sec`` must
exceed the longest turn. A larger one goes in one call per bucket between ``/pause_generation`` (``engine.pause_mode``:
'abort' turns return and are retried, 'retract' turns resume on the new weights and report the oldest version) and
``/continue_generation`` (``SGLangEngine.receive_broadcast``). FireFlash's own server installs between decode
steps, with the same one-version-per-turn result. The group's members are the servers that are up (each is
pinged before the group is formed and before every update): a server that dies is dropped (the group is formed
anew without it) and joins a new group when Ray has restarted it.

Simplifications, named: a server that dies in the middle of a transfer leaves trainer rank 0 blocked in the
collective until ``weight_sync_timeout_sec`` (gloo then raises and the update is retried without it; NCCL's
watchdog may abort the trainer process, which ends the run: ``--resume`` continues from the last checkpoint); a
server that is alive but hangs is not detected (its requests time out and cost their attempts' tries); vLLM
servers are not driven here, because vLLM's weight transfer needs its own trainer-side communicator
(``engines/vllm.py``); an ``engine.url`` given in the config is used as one external server that FireFlash neither
launches nor restarts.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from fireflash.engines.config import EngineConfig
from fireflash.protocols import Engine


class RunningServer(Protocol):
    """An engine server this process started: where it listens and whether it still runs."""

    url: str

    def alive(self) -> bool: ...

    def close(self) -> None: ...


ServerBuilder = Callable[[int], RunningServer]
"""``build(engine_index) → RunningServer``, run inside the engine-server actor; picklable (module-level or a
partial of one). Ray has set CUDA_VISIBLE_DEVICES to the actor's GPUs."""

ServerClient = Callable[[str], Any]
"""``connect(url) → Engine`` client speaking the server's API (``SGLangEngine``), with ``init_weight_sync`` and
``receive_broadcast`` for the collective path."""


class EnginesLost(RuntimeError):
    """Every rollout engine server died for good (its restarts spent)."""


@dataclass
class ProcessServer:
    """A server in a child process (``launch_sglang`` / ``launch_fireflash_server``)."""

    process: subprocess.Popen
    url: str

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside a Ray worker: this machine only
        return "127.0.0.1"


# the engine section's fields that configure FireFlash's server (a local engine); the rest are client settings
_LOCAL_ENGINE_FIELDS = (
    "max_batch_size", "prompt_lookup_tokens", "prompt_lookup_ngram_max", "prefix_cache_tokens", "prefill_chunk_tokens",
    "shared_prefix_min_tokens", "rollout_dtype", "num_threads", "seed",
)


def launch_engine_server(
    index: int, *, engine: EngineConfig, model_dir: str, log_dir: str, num_cpus: float, timeout_sec: float = 900.0
) -> ProcessServer:
    """The default ``ServerBuilder`` of ``fireflash train`` (use with ``functools.partial``): one server on a
    free port of this node, listening on every interface, its log in ``log_dir/engine-{index}.log``; the kernel
    kills it when the actor's process dies, so a restarted actor never finds the old server on its GPUs.

    ``engine.server = 'native'`` launches SGLang itself with its own flags ``engine.args`` passed through;
    ``'fireflash'`` launches FireFlash's SGLang-compatible server over the local transformers engine (CPU nodes),
    configured by the section's local-engine fields, with the actor's CPU reservation ``num_cpus`` as its thread
    budget unless ``engine.num_threads`` is set.

    Raises:
        ValueError: a kind other than 'sglang'.
        fireflash.engines.http.EngineHTTPError: the server exited or did not become healthy in time.
    """
    if engine.kind != "sglang":
        raise ValueError(
            f"engine.kind = {engine.kind!r}: the Ray backend launches SGLang-API servers only (vLLM's weight transfer "
            "needs its own trainer-side communicator); use engine.kind = 'sglang'"
        )
    port = _free_port()
    log = Path(log_dir) / f"engine-{index}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if engine.server == "fireflash":
        from fireflash.engines.serve_process import launch_fireflash_server

        local = {k: getattr(engine, k) for k in _LOCAL_ENGINE_FIELDS}
        local["num_threads"] = engine.num_threads or max(1, int(num_cpus))
        process = launch_fireflash_server(
            model_dir, port, local, timeout_sec=timeout_sec, log_path=log, host="0.0.0.0",
            weight_sync_timeout_sec=engine.weight_sync_timeout_sec, die_with_parent=True,
        )
    else:
        from fireflash.engines.sglang_launch import launch_sglang

        process = launch_sglang(model_dir, port, engine.args, timeout_sec=timeout_sec, log_path=log, host="0.0.0.0",
                                die_with_parent=True)
    return ProcessServer(process, f"http://{_node_ip()}:{port}")


def connect_engine(engine: EngineConfig, url: str, control: bool = False) -> Engine:
    """A client of the server at ``url`` with the ``engine`` section's settings (``functools.partial`` it).

    ``control``: the driver's client for weight updates: never retried (a repeated ``/init_weights_update_group``
    or receive would wait for a broadcast that never comes) and allowed the whole ``weight_sync_timeout_sec``.
    """
    from fireflash.engines import make_engine

    update: dict[str, Any] = {"url": url}
    if control:
        update |= {"max_retries": 0,
                   "request_timeout_sec": max(engine.request_timeout_sec, engine.weight_sync_timeout_sec + 60)}
    return make_engine(engine.model_copy(update=update), "")


class EngineServerWorker:
    """One rollout engine server, owned by a Ray actor (``ray.remote`` with the engine's GPUs and CPUs).

    Args:
        build: starts the server (``ServerBuilder``).
        index: the engine's index (passed to ``build``).
    """

    def __init__(self, build: ServerBuilder, index: int) -> None:
        self.index = index
        self.server = build(index)

    def ping(self) -> tuple[int, str]:
        """(process id, server URL). Exits the actor when the server has died, so Ray restarts both."""
        if not self.server.alive():
            os._exit(1)
        return os.getpid(), self.server.url

    def close(self) -> None:
        self.server.close()


class TrainerWeightSender:
    """Trainer rank 0's end of the weight-update group with the servers (lives in the trainer worker).

    Every trainer rank runs ``TrainerWorker.weight_specs`` / ``broadcast_weights`` / ``save_weights``: a sharded
    trainer gathers its full weights collectively, and only rank 0 (whose ``state_dict`` holds them) sends or writes.
    """

    def __init__(self) -> None:
        self.group: Any = None
        self.send: Callable[[list[tuple[str, Any]]], None] | None = None

    def join(self, address: str, port: int, world_size: int, backend: str, group_name: str, timeout_sec: float) -> None:
        """Create the group as its rank 0 (blocks until every server has joined); leaves an earlier one."""
        from fireflash.engines.weight_sync import init_weight_update_group, tensor_broadcaster

        self.leave()
        self.group = init_weight_update_group(address, port, 0, world_size, backend, group_name, timeout_sec)
        self.send = tensor_broadcaster(self.group, "cuda" if backend == "nccl" else "cpu")

    def leave(self) -> None:
        if self.group is not None:
            import torch.distributed as dist

            dist.destroy_process_group(self.group)
            self.group = self.send = None

    @staticmethod
    def specs(state: Mapping[str, Any]) -> list[Any]:
        from fireflash.engines.weights import specs_of

        return specs_of(list(state.items()))

    def broadcast(self, state: Mapping[str, Any]) -> None:
        """Send every tensor of ``state``, in order (``state`` empty on ranks other than 0: nothing to do).

        Raises:
            RuntimeError: rank 0 has not joined a group.
        """
        if not state:
            return
        if self.send is None:
            raise RuntimeError("broadcast before join: the driver connects the weight-update group first")
        self.send(list(state.items()))


def save_weights(model: Any, tokenizer: Any, state: Mapping[str, Any], root: Path, version: int) -> Path:
    """Write ``root/weights-v{version:06d}`` (an HF directory) for servers to load; keeps the newest two."""
    from fireflash.engines.weight_sync import DiskWeightSync

    path = DiskWeightSync(root, model, tokenizer).save(state, version)
    for old in sorted(root.glob("weights-v*"))[:-2]:
        shutil.rmtree(old, ignore_errors=True)
    return path


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


class ServerWeightSync:
    """The driver's side of pushing new weights from the trainer workers to the engine servers (RECIPE.md §1).

    Args:
        mode: 'collective' (a weight-update group, trainer rank 0 = group rank 0) or 'disk' (an HF directory
            per version under ``weights_dir``, which every server must see).
        connect: builds a control client for a server URL (``SGLangEngine``).
        ranks_per_server: group ranks each server takes (its tensor-parallel size; 1 for a CPU server).
        backend: 'nccl' (GPUs) or 'gloo' (CPU).
        weights_dir: where disk mode writes.
        timeout_sec: a member that does not join, or a transfer that stalls, fails after this long.
    """

    def __init__(
        self,
        mode: Literal["collective", "disk"],
        connect: ServerClient,
        ranks_per_server: int,
        backend: str,
        weights_dir: Path,
        timeout_sec: float,
    ) -> None:
        self.mode, self.connect, self.ranks_per_server = mode, connect, ranks_per_server
        self.backend, self.weights_dir, self.timeout_sec = backend, Path(weights_dir), timeout_sec
        self.clients: dict[str, Any] = {}  # by URL
        self.members: tuple[str, ...] = ()  # URLs of the current group, in rank order
        self.group_of: dict[str, str] = {}  # URL → the group it joined last (left before it joins another)
        self._leaving: set[asyncio.Future[Any]] = set()  # leave calls still running
        self.generation = 0
        self.specs: list[Any] | None = None

    def _client(self, url: str) -> Any:
        if url not in self.clients:
            self.clients[url] = self.connect(url)
        return self.clients[url]

    async def join(self, trainers: Sequence[Any], urls: Sequence[str]) -> None:
        """Form a new weight-update group of trainer rank 0 and the servers at ``urls`` (collective mode)."""
        if self.mode != "collective" or tuple(urls) == self.members:
            return
        # servers leave the group they joined last (a gloo group holds sockets, an NCCL one GPU memory), in the
        # background: after a failed transfer a survivor is still receiving on it until weight_sync_timeout_sec,
        # and its leave waits for that; the new group, under a new name, does not
        for u in urls:
            if u in self.group_of:
                self._background(self._client(u).destroy_weight_sync(self.group_of.pop(u)))
        self.generation += 1
        name = f"fireflash-weights-{self.generation}"
        address, port = await trainers[0].address.remote()
        world = 1 + self.ranks_per_server * len(urls)
        clients = [self._client(u) for u in urls]
        for u, c in zip(urls, clients):
            c.group_name = self.group_of[u] = name
        await asyncio.gather(
            trainers[0].join_weight_group.remote(address, port, world, self.backend, name, self.timeout_sec),
            *(c.init_weight_sync(address, port, world, rank_offset=1 + i * self.ranks_per_server, backend=self.backend)
              for i, c in enumerate(clients)),
        )
        self.members = tuple(urls)
        if self.specs is None:
            self.specs = next(s for s in await asyncio.gather(*(t.weight_specs.remote() for t in trainers)) if s)

    async def publish(self, trainers: Sequence[Any], urls: Sequence[str], version: int) -> None:
        """Install the trainer's current weights, tagged ``version``, in every server at ``urls``.

        Collective: ``join`` must have formed a group of exactly these servers. In-flight requests finish on
        the weights they started with (the server takes the update between its requests' turns).

        Raises:
            Any client or actor error: a server failed during the update (the caller drops it and retries).
        """
        if self.mode == "collective":
            if tuple(urls) != self.members or self.specs is None:
                raise RuntimeError(f"publish to {list(urls)} but the group holds {list(self.members)}: join them first")
            await asyncio.gather(
                *(t.broadcast_weights.remote() for t in trainers),
                *(self._client(u).receive_broadcast(self.specs, version) for u in urls),
            )
        else:
            paths = await asyncio.gather(*(t.save_weights.remote(str(self.weights_dir), version) for t in trainers))
            path = Path(next(p for p in paths if p))
            await asyncio.gather(*(self._client(u).update_weights(path, version) for u in urls))

    def _background(self, call: Any) -> None:
        """Run a best-effort control call without waiting for it (its failure changes nothing)."""
        task = asyncio.ensure_future(call)
        self._leaving.add(task)
        task.add_done_callback(lambda t: (self._leaving.discard(t), t.cancelled() or t.exception()))

    def reset(self) -> None:
        """Forget the current group after a failed update: the next ``join`` forms a new one."""
        self.members = ()

    async def forget(self, url: str) -> None:
        """Drop the client of a server that moved or died (its process, and its groups, are gone)."""
        self.group_of.pop(url, None)
        client = self.clients.pop(url, None)
        if client is not None and hasattr(client, "close"):
            await client.close()

    async def close(self) -> None:
        for task in self._leaving:
            task.cancel()
        for url in list(self.clients):
            await self.forget(url)


class DiskSyncedEngine:
    """A server engine whose state-dict updates go through an HF directory (``engine.weight_sync = 'disk'``).

    For the local backend with an SGLang server: ``update_weights(state, v)`` writes ``weights-v{v}`` under
    ``root`` (the newest two kept) and asks the server to load it; everything else is the wrapped client's.
    """

    def __init__(self, engine: Any, model: Any, tokenizer: Any, root: Path) -> None:
        self.engine, self.model, self.tokenizer, self.root = engine, model, tokenizer, Path(root)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    async def update_weights(self, weights: Mapping[str, Any] | Path, version: int) -> None:
        if not isinstance(weights, (str, Path)):
            weights = await asyncio.to_thread(save_weights, self.model, self.tokenizer, weights, self.root, version)
        await self.engine.update_weights(Path(weights), version)


async def connect_local_trainer(
    engine: Any, trainer: Any, mode: Literal["collective", "disk"], weights_dir: Path, timeout_sec: float
) -> Any:
    """Make an SGLang server take the in-process trainer's weights now and after every step (the local backend).

    The server gets the trainer's current weights (tagged with its version) before it samples anything: what
    it serves at start is not known here (launched from another directory, or left from an earlier run whose
    versions it still reports), and a result tagged with another run's version is wrong or out of range.

    'collective': this process creates a two-member weight-update group (trainer rank 0, the server rank 1;
    gloo, so it also works when both share one GPU) and ``engine.update_weights(state, v)`` broadcasts through
    it. 'disk': returns a ``DiskSyncedEngine``. Returns the engine to give the runtime.

    ``timeout_sec`` (``engine.weight_sync_timeout_sec``) is the group's timeout and, set as the engine's
    ``weight_sync_timeout_sec``, how long each update's call waits for the server (``SGLangEngine``: a collective
    call is never retried and outlasts the group; failures name the server, the call and the version).

    Raises:
        ValueError: an engine without ``init_weight_sync`` (only SGLang clients are driven this way).
        fireflash.engines.http.WeightSyncFailed: the server or this process could not form the group.
    """
    engine.weight_sync_timeout_sec = timeout_sec
    if mode == "disk":
        synced = DiskSyncedEngine(engine, trainer.model, trainer.tokenizer, weights_dir)
        await synced.update_weights(trainer.state_dict(), trainer.weight_version)
        return synced
    if not hasattr(engine, "init_weight_sync") or not hasattr(engine, "broadcast"):
        raise ValueError(f"engine {type(engine).__name__} cannot join a weight-update group; use engine.weight_sync = 'disk'")
    from urllib.parse import urlsplit

    from fireflash.engines.http import WeightSyncFailed
    from fireflash.engines.weight_sync import init_weight_update_group, tensor_broadcaster

    # the address the server reaches this process at: the local end of a connection to it
    where = urlsplit(engine.http.base_url)
    with socket.create_connection((where.hostname, where.port or 80), timeout=30) as probe:
        address = probe.getsockname()[0]
    port = _free_port()

    # a client whose server needs its own trainer-side group (vLLM: engines/vllm_transfer.py) brings its own end
    trainer_end = getattr(engine, "trainer_broadcaster", None)

    async def create() -> Any:
        try:
            if trainer_end is not None:
                return await asyncio.to_thread(trainer_end, address, port, 2, "gloo", timeout_sec)
            group = await asyncio.to_thread(init_weight_update_group, address, port, 0, 2, "gloo", engine.group_name,
                                            timeout_sec)
            return tensor_broadcaster(group, "cpu")
        except Exception as e:
            raise WeightSyncFailed(engine.http.base_url, "trainer join of the weight-update group", None, e) from e

    _, engine.broadcast = await asyncio.gather(engine.init_weight_sync(address, port, world_size=2, backend="gloo"),
                                               create())
    await engine.update_weights(trainer.state_dict(), trainer.weight_version)
    return engine
