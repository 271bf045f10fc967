"""Rollout engines as servers on the Ray backend: launching SGLang, vLLM (or FireFlash's own) processes inside actors.

    EngineServerWorker × E (Ray actor, gpus_per_engine GPUs)        RayRuntime (driver)
      build_server(index) → RunningServer: a process, its URL  ───►   each attempt goes to the healthy server with
      ping() → (pid, url); exits when its server process died,         the fewest attempts in flight; a server that
        so Ray restarts the actor and the server with it               fails is pinged, waited for, re-joined and
                                                                        caught up before it gets attempts again
                                                                        (server_fleet.py)

Weights reach the servers through ``server_weights.py``; the local backend's one server is ``local_server.py``.

Simplifications, named: a server that is alive but hangs is not detected (its requests time out and cost their
attempts' tries); an ``engine.url`` given in the config is used as one external server that FireFlash neither
launches nor restarts; FireFlash's vLLM stand-in (``engines/vllm_serve.py``) runs in process only (tests), so
``engine.kind = 'vllm'`` launches vLLM itself.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
"""``connect(url) → Engine`` client speaking the server's API (``SGLangEngine`` or ``VLLMEngine``), with
``init_weight_sync`` and ``receive_broadcast`` for the collective path."""


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


def free_port() -> int:
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

    ``engine.server = 'native'`` launches SGLang (``engine.kind = 'sglang'``) or vLLM (``'vllm'``, with
    ``VLLM_SERVER_DEV_MODE=1`` and the weight-transfer flags of ``launch_vllm``) itself, with its own flags
    ``engine.args`` passed through; ``'fireflash'`` launches FireFlash's SGLang-compatible server over the local
    transformers engine (CPU nodes), configured by the section's local-engine fields, with the actor's CPU reservation
    ``num_cpus`` as its thread budget unless ``engine.num_threads`` is set.

    Raises:
        ValueError: a kind other than 'sglang' / 'vllm', or 'vllm' with ``engine.server = 'fireflash'``.
        fireflash.engines.http.EngineHTTPError: the server exited or did not become healthy in time.
    """
    check_launchable(engine)
    port = free_port()
    log = Path(log_dir) / f"engine-{index}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if engine.kind == "vllm":
        from fireflash.engines.vllm import launch_vllm

        process = launch_vllm(model_dir, port, engine.args, timeout_sec=timeout_sec, log_path=log, host="0.0.0.0",
                              die_with_parent=True)
    elif engine.server == "fireflash":
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


def check_launchable(engine: EngineConfig) -> None:
    """Refuse an engine section ``launch_engine_server`` cannot start (placement calls it before anything starts).

    Raises:
        ValueError: the message names the field and the fix.
    """
    if engine.kind not in ("sglang", "vllm"):
        raise ValueError(f"engine.kind = {engine.kind!r}: the Ray backend launches 'sglang' or 'vllm' servers")
    if engine.kind == "vllm" and engine.server == "fireflash":
        raise ValueError(
            "engine.kind = 'vllm' with engine.server = 'fireflash': FireFlash's vLLM stand-in runs in process only "
            "(tests); use engine.server = 'native' (vLLM itself, on GPUs) or engine.kind = 'sglang' with the "
            "'fireflash' server on CPU nodes"
        )


def connect_engine(engine: EngineConfig, url: str, control: bool = False) -> Engine:
    """A client of the server at ``url`` with the ``engine`` section's settings (``functools.partial`` it).

    ``control``: the driver's client for weight updates: never retried (a repeated ``/init_weights_update_group``
    or receive would wait for a broadcast that never comes) and allowed the whole ``weight_sync_timeout_sec``.
    Otherwise a rollout worker's sampling client; a vLLM one reads each result's version from the server, whose
    weights the driver's control client updates (``VLLMEngine.versions_from_server``).
    """
    from fireflash.engines import make_engine

    update: dict[str, Any] = {"url": url}
    if control:
        update |= {"max_retries": 0,
                   "request_timeout_sec": max(engine.request_timeout_sec, engine.weight_sync_timeout_sec + 60)}
    client = make_engine(engine.model_copy(update=update), "")
    if engine.kind == "vllm" and not control:
        client.versions_from_server = True  # type: ignore[attr-defined]
    return client


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

