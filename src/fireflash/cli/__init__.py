"""cli: every command of FireFlash (see README.md in this folder); nothing in src/fireflash imports it.

The ``fireflash`` app is ``fireflash.cli.main.app``. ``app`` and ``main`` are re-exported lazily, so the console
script (``fireflash.cli:app``) keeps working, while ``python -m fireflash.cli.serve`` (a server child process)
does not load every command first.
"""

import importlib

_EXPORTS = {"app": "fireflash.cli.main", "main": "fireflash.cli.main", "resolve_config": "fireflash.cli.main"}
__all__ = ["app", "main", "resolve_config"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fireflash.cli' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
