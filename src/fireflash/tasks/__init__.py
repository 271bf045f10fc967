"""tasks stage of the FireFlash pipeline (see README.md in this folder).

    tasks, errors = load_tasks(["bundled:train", "path/to/harbor-tasks"])
    report = await validate_task(tasks[0], make_backend(SandboxConfig()))

Exports load lazily: ``fireflash.config`` imports ``fireflash.tasks.config``, and every CLI start
should not pay for the loaders and gates.
"""

import importlib

_EXPORTS = {
    "GateReport": "fireflash.tasks.gates",
    "validate_task": "fireflash.tasks.gates",
    "TaskLoadError": "fireflash.tasks.loader",
    "bundled_tasks": "fireflash.tasks.loader",
    "load_pool": "fireflash.tasks.loader",
    "load_task": "fireflash.tasks.loader",
    "load_tasks": "fireflash.tasks.loader",
}
__all__ = ["GateReport", "TaskLoadError", "bundled_tasks", "load_pool", "load_task", "load_tasks", "validate_task"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fireflash.tasks' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
