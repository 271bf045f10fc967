"""sandbox stage of the FireFlash pipeline: isolated, forkable environments with a persistent shell.

    backend = make_backend(cfg.sandbox)          # 'bwrap' (default) or 'unsafe-local'
    parent = await backend.prepare(task.environment, task.id)
    attempt = await parent.fork()                 # milliseconds, copy-on-write
    result = await attempt.exec("pytest -q", timeout_sec=60)
    grading = await attempt.fork()                # the agent never sees the tests
    await backend.close()

See README.md in this folder for the files, and bwrap.py for what isolation is and is not guaranteed.
"""

from __future__ import annotations

from fireflash.protocols import SandboxBackend
from fireflash.sandbox.config import SandboxConfig
from fireflash.sandbox.errors import OutOfProcesses, SandboxClosed, SandboxError, SandboxUnavailable
from fireflash.sandbox.host import check_host

BACKENDS = {
    "bwrap": "fireflash.sandbox.bwrap.BwrapBackend",
    "unsafe-local": "fireflash.sandbox.local.LocalBackend",
}
"""Backend names → classes (dotted paths), STYLE.md 13."""


def make_backend(cfg: SandboxConfig) -> SandboxBackend:
    """The backend named by ``cfg.backend``.

    Raises:
        SandboxUnavailable: the host lacks what the backend needs (the message says how to fix it).
        ValueError: an unknown backend name.
    """
    import importlib

    path = BACKENDS.get(cfg.backend)
    if path is None:
        raise ValueError(f"sandbox.backend = {cfg.backend!r}: choose one of {sorted(BACKENDS)}")
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)(cfg)


__all__ = [
    "OutOfProcesses",
    "SandboxClosed",
    "SandboxConfig",
    "SandboxError",
    "SandboxUnavailable",
    "check_host",
    "make_backend",
]
