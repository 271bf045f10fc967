"""The local backend with one SGLang server: the in-process trainer's weights reach it now and after every step.

``connect_local_trainer`` forms a two-member weight-update group (or, with ``engine.weight_sync = 'disk'``, wraps
the client in ``DiskSyncedEngine``); ``fireflash train`` calls it when ``engine.url`` names a server.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from fireflash.runtime.server_weights import save_weights
from fireflash.runtime.servers import free_port


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
    port = free_port()

    # a client whose server needs its own trainer-side group (vLLM: engines/vllm_transfer.py) brings its own end
    trainer_end = getattr(engine, "trainer_broadcaster", None)

    async def create() -> Any:
        try:
            if trainer_end is not None:
                return await asyncio.to_thread(trainer_end, address, port, 2, "gloo", timeout_sec)
            group = await asyncio.to_thread(init_weight_update_group, address, port, 0, 2, "gloo", engine.group_name,
                                            timeout_sec)
            engine.trainer_group = group  # left by engine.close()
            return tensor_broadcaster(group, "cpu")
        except Exception as e:
            raise WeightSyncFailed(engine.http.base_url, "trainer join of the weight-update group", None, e) from e

    _, engine.broadcast = await asyncio.gather(engine.init_weight_sync(address, port, world_size=2, backend="gloo"),
                                               create())
    await engine.update_weights(trainer.state_dict(), trainer.weight_version)
    return engine
