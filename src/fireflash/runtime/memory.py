"""Keeping a long local run's resident memory flat: one trainer thread, freed memory handed back, RSS logged.

Why this exists (measured, issue 8): ``fireflash train`` on the 24 GiB machine grew by ~4.5 GB per step
until the kernel killed it. A training step allocates and frees gigabytes of activations in tensors of
1–32 MB. glibc serves those from the arena of the thread that asks, and keeps freed memory in that arena
for reuse instead of returning it. ``asyncio.to_thread`` runs each step on whichever pool thread is free
(sandbox calls share that pool), so every step could land in another arena and leave another step's worth
of memory parked there. Hence:

- ``TrainerThread``: every trainer call (step, weights, checkpoint) runs on one dedicated thread, so
  its allocations always reuse one arena (and the trainer's torch thread budget is set in that thread);
- ``release_free_memory``: ``malloc_trim(0)`` after each step returns what the arenas hold free to the
  operating system (the engine's decode thread and the pool threads included);
- ``memory_gb``: logged each step as ``memory/rss_gb`` and ``memory/peak_rss_gb``.

Off glibc (macOS, musl) the trim is a no-op and only the single thread remains.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_free_memory() -> bool:
    """Return the C heap's free memory to the OS (glibc ``malloc_trim(0)``, all arenas); False off glibc.

    Takes milliseconds to tens of milliseconds after a step that freed gigabytes.
    """
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def _status_kb(*fields: str) -> list[float]:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return [float("nan")] * len(fields)
    values = {line.split(":", 1)[0]: line.split()[1] for line in text.splitlines() if ":" in line and len(line.split()) > 1}
    return [float(values[f]) if f in values else float("nan") for f in fields]


def rss_gb() -> float:
    """This process's resident set size now, in GiB (NaN where /proc is missing)."""
    return _status_kb("VmRSS")[0] / 2**20


def peak_rss_gb() -> float:
    """This process's peak resident set size so far, in GiB (NaN where /proc is missing)."""
    return _status_kb("VmHWM")[0] / 2**20


def memory_gb() -> tuple[float, float]:
    """(resident set size now, peak so far) in GiB, from one read, so the first never exceeds the second.

    Why one read: the kernel updates the high-water mark lazily; two separate reads around a moment when
    memory is handed back (``release_free_memory``) can return a peak below the RSS read just before.
    """
    rss, hwm = _status_kb("VmRSS", "VmHWM")
    return rss / 2**20, max(rss, hwm) / 2**20


def _set_torch_threads(n: int) -> None:
    import torch

    # get first: torch initialises a thread's budget lazily, on its first use, from the last value set in any
    # thread; a set before that initialisation would be overwritten by another role's later set
    torch.get_num_threads()
    torch.set_num_threads(n)


class TrainerThread:
    """One dedicated thread for all trainer work; ``await run(fn, *args)`` is ``to_thread`` pinned to it.

    Trainer calls never overlap (the loop awaits each), so one thread loses nothing and keeps every step's
    allocations in one malloc arena (see the module docstring). ``trim=True`` calls ``release_free_memory``
    after each call on the same thread.

    ``num_threads``: the trainer's torch intra-op budget (OpenMP and MKL), set inside the thread when it
    starts. torch keeps one budget per thread, and a thread's budget starts as the last value set in any
    thread, so a budget set from the main thread would be overridden by whatever another role (the engine)
    set last. None: that inherited value.
    """

    def __init__(self, name: str = "fireflash-trainer", num_threads: int | None = None) -> None:
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {num_threads}")
        self.num_threads = num_threads
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name,
            initializer=None if num_threads is None else _set_torch_threads, initargs=(num_threads,),
        )

    async def run(self, fn: Callable[..., T], *args: Any, trim: bool = False) -> T:
        """Run ``fn(*args)`` on the trainer thread; exceptions propagate to the awaiting caller."""

        def call() -> T:
            try:
                return fn(*args)
            finally:
                if trim:
                    release_free_memory()

        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        """Stop the thread once its current call (if any) returns."""
        self._pool.shutdown(wait=False, cancel_futures=True)
