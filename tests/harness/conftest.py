"""Shared helpers: a real sandbox per scenario (bwrap by default) and the tiny tokenizer.

Sandboxes hold pipes bound to one event loop, so each test runs its whole scenario inside one
``asyncio.run`` through the ``in_sandbox`` fixture: ``in_sandbox(async_fn)`` → ``async_fn(sandbox)``'s value. ``FIREFLASH_TEST_SANDBOX=unsafe-local`` selects the other backend.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fireflash.models import build_tiny_tokenizer
from fireflash.protocols import Sandbox, Task, TaskEnvironment, TaskLimits

BACKEND = os.environ.get("FIREFLASH_TEST_SANDBOX", "bwrap")
WORKDIR = "/app"


def _make_task(instruction: str = "Create /app/out.txt.", workdir: str = WORKDIR, files_dir=None, **limits: Any) -> Task:
    return Task(id="t-harness", instruction=instruction,
                environment=TaskEnvironment(workdir=workdir, files_dir=files_dir), limits=TaskLimits(**limits))


def _in_sandbox(fn: Callable[[Sandbox], Awaitable[Any]], files_dir=None, workdir: str = WORKDIR) -> Any:
    """Run ``fn(sandbox)`` on a fork of a fresh parent environment; everything is closed afterwards."""
    from fireflash.sandbox import make_backend
    from fireflash.sandbox.config import SandboxConfig

    async def main() -> Any:
        backend = make_backend(SandboxConfig(backend=BACKEND))
        try:
            parent = await backend.prepare(TaskEnvironment(workdir=workdir, files_dir=files_dir), "harness-test")
            child = await parent.fork()
            try:
                return await fn(child)
            finally:
                await child.close()
        finally:
            await backend.close()

    return asyncio.run(main())


@pytest.fixture(scope="session")
def tiny_tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def in_sandbox():
    return _in_sandbox


@pytest.fixture(scope="session")
def make_task():
    return _make_task
