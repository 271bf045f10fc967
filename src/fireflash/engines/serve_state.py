"""What the routes of FireFlash's SGLang-compatible server share: the weight-update groups it belongs to, the
pause / abort state, weight installation (``_Service``), and running a blocking collective off the event loop
(``_in_thread``, also used by ``vllm_serve``).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from fireflash.engines.serve_bodies import BadRequest
from fireflash.engines.weight_sync import apply_between_turns
from fireflash.protocols import Engine


def _in_thread(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    """Run blocking ``fn(*args)`` in a fresh daemon thread (a rendezvous or collective can block for minutes: it
    must neither hold an executor thread nor keep the process alive at exit)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def work() -> None:
        try:
            value, ok = fn(*args), True
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            value, ok = e, False
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle, ok, value)

    threading.Thread(target=work, name=f"fireflash-serve-{getattr(fn, '__name__', 'work')}", daemon=True).start()
    return fut


def _receive(specs: list[tuple[str, torch.dtype, tuple[int, ...]]], group: Any, device: str) -> dict[str, torch.Tensor]:
    """Each tensor, in order, from group rank 0 (SGLang's ``update_weights_from_distributed``)."""
    state, works = {}, []
    for name, dtype, shape in specs:
        state[name] = torch.empty(shape, dtype=dtype, device=device)
        works.append(dist.broadcast(state[name], src=0, group=group, async_op=True))
    for work in works:
        work.wait()
    return state


class _Groups:
    """Weight-update groups this server belongs to, by name; one receive or destroy at a time per group."""

    def __init__(self) -> None:
        self.groups: dict[str, tuple[Any, str]] = {}  # name → (process group, backend)
        self.joining: set[str] = set()
        self.locks: dict[str, asyncio.Lock] = {}

    def check_free(self, name: str) -> None:
        from torch.distributed.distributed_c10d import _world

        if name in self.groups or name in self.joining:
            raise BadRequest(("group_name",), f"this server already is (or is becoming) a member of group {name!r}: "
                             "destroy it first (/destroy_weights_update_group) or use another name")
        if name in _world.pg_names.values():
            raise BadRequest(("group_name",), f"this process already holds a group named {name!r} (another server "
                             "in the same process?): one process can join a group name once")

    def get(self, name: str) -> tuple[Any, str]:
        if name not in self.groups:
            raise BadRequest(("group_name",), f"unknown weight-update group {name!r} (this server's groups: "
                             f"{sorted(self.groups)}); call /init_weights_update_group first")
        return self.groups[name]

    def lock(self, name: str) -> asyncio.Lock:
        return self.locks.setdefault(name, asyncio.Lock())


def _takes_in_place(engine: Engine) -> bool:
    """Whether ``engine.update_weights`` can hand running requests to the new weights (``LocalEngine``'s
    ``in_place``); a ``ScriptedEngine`` cannot, and its requests finish on the weights they started with."""
    return "in_place" in inspect.signature(engine.update_weights).parameters


class _Service:
    """What the routes share: the engine, its groups, whether a client paused it."""

    def __init__(self, engine: Engine, model_path: str, weight_sync_timeout_sec: float) -> None:
        self.engine, self.model_path, self.timeout_sec = engine, model_path, weight_sync_timeout_sec
        self.groups = _Groups()
        self.paused = False
        self.pause_mode = ""  # the mode of the /pause_generation in force ('' while not paused by a client)
        self.staged: dict[str, dict[str, torch.Tensor]] = {}  # group → tensors received without a weight_version
        self.in_flight: set[asyncio.Future] = set()  # /generate calls on the engine (aborted by pause 'abort')
        self.aborted: set[asyncio.Future] = set()  # those a pause 'abort' cancelled
        self.retracted: set[asyncio.Future] = set()  # those a pause 'retract' returned early, to sample on after continue
        self.resumed = asyncio.Event()  # set while not paused: /generate waits on it (tokenizer_manager's is_pause)
        self.resumed.set()
        self.install_lock = asyncio.Lock()  # one installation at a time (a Lock binds to a loop on first use)

    async def install(self, weights: Mapping[str, torch.Tensor] | Path, version: int) -> None:
        async with self.install_lock:
            if self.paused and self.pause_mode == "in_place" and _takes_in_place(self.engine):
                # SGLang's 'in_place' (io_struct.PauseGenerationReqInput): paused requests keep their KV cache and
                # go on after /continue_generation with it, decoding on the weights installed meanwhile
                await self.engine.update_weights(weights, version, in_place=True)
            elif self.paused:  # a client paused the engine: keep it paused until /continue_generation
                await self.engine.update_weights(weights, version)
            else:
                await apply_between_turns(self.engine, weights, version)

    async def close(self) -> None:
        """Leave every group, then close the engine if it has ``close``."""
        for name in list(self.groups.groups):
            group, _ = self.groups.groups.pop(name)
            dist.destroy_process_group(group)
        close = getattr(self.engine, "close", None)
        if close is not None:
            await close()

