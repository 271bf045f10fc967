"""Deterministic fault injection: wrappers that make sandboxes crash, engine calls fail and graders hang.

They ship in src (STYLE.md 21) so that anyone can check that their own backends cost an attempt, never
a run, when infrastructure breaks (RECIPE.md §1: groups lost to infrastructure fell from 12% to 0.5%).
Each wrapper draws from its own seeded generator, so a run with the same seed fails the same calls.

    backend = FlakyBackend(make_backend(cfg), fork_failure_rate=0.10, seed=1)
    engine = FlakyEngine(engine, failure_rate=0.05, seed=2)
    grader = HangingGrader(make_grader(spec), hang_rate=0.02, seed=3)
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fireflash.protocols import (
    Engine,
    GenerateRequest,
    GenerateResult,
    Grader,
    Sandbox,
    SandboxBackend,
    Score,
    Task,
    TaskEnvironment,
)


class InjectedFault(RuntimeError):
    """A failure injected on purpose by a fault wrapper."""


class _FlakySandbox:
    """Delegates to a real parent sandbox; its ``fork`` fails as its backend decides."""

    def __init__(self, inner: Sandbox, backend: FlakyBackend) -> None:
        self._inner, self._backend = inner, backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fork(self, user: str | None = None, offline: bool = False) -> Sandbox:
        if self._backend._rng.random() < self._backend._rate:
            self._backend.injected += 1
            raise InjectedFault("injected sandbox crash at fork")
        kwargs = {k: v for k, v in (("user", user), ("offline", offline)) if v}
        return await self._inner.fork(**kwargs)


class FlakyBackend:
    """A ``SandboxBackend`` whose parents' ``fork()`` crashes with probability ``fork_failure_rate``."""

    def __init__(self, inner: SandboxBackend, fork_failure_rate: float, seed: int = 0) -> None:
        self._inner, self._rate, self._rng = inner, fork_failure_rate, random.Random(seed)
        self.injected = 0

    async def prepare(self, env: TaskEnvironment, name: str) -> Sandbox:
        return _FlakySandbox(await self._inner.prepare(env, name), self)

    async def close(self) -> None:
        await self._inner.close()


class FlakyEngine:
    """An ``Engine`` whose ``generate`` raises with probability ``failure_rate`` (after a short delay)."""

    def __init__(self, inner: Engine, failure_rate: float, seed: int = 0) -> None:
        self._inner, self._rate, self._rng = inner, failure_rate, random.Random(seed)
        self.injected = 0

    @property
    def weight_version(self) -> int:
        return self._inner.weight_version

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        if self._rng.random() < self._rate:
            self.injected += 1
            await asyncio.sleep(0)
            raise InjectedFault("injected engine error (connection reset)")
        return await self._inner.generate(requests)

    async def update_weights(self, weights: Mapping[str, Any] | Path, version: int) -> None:
        await self._inner.update_weights(weights, version)

    async def pause(self) -> None:
        await self._inner.pause()

    async def resume(self) -> None:
        await self._inner.resume()


class HangingGrader:
    """A ``Grader`` that never returns with probability ``hang_rate`` (the runtime's hang guard must fire)."""

    def __init__(self, inner: Grader, hang_rate: float, seed: int = 0) -> None:
        self._inner, self._rate, self._rng = inner, hang_rate, random.Random(seed)
        self.injected = 0

    async def grade(self, task: Task, sandbox: Sandbox) -> Score:
        if self._rng.random() < self._rate:
            self.injected += 1
            await asyncio.Event().wait()  # hangs until cancelled
        return await self._inner.grade(task, sandbox)
