"""tasks stage of the FireFlash pipeline (see README.md in this folder).

    tasks, errors = load_tasks(["bundled:train", "path/to/harbor-tasks"])

The nine validation gates, probing and the training pool live one stage up, in ``fireflash.curation``.
Exports load lazily: ``fireflash.config`` imports ``fireflash.tasks.config``, and every CLI start
should not pay for the loaders.
"""

import importlib

_EXPORTS = {
    "TaskLoadError": "fireflash.tasks.task_fields",
    "bundled_tasks": "fireflash.tasks.loader",
    "load_task": "fireflash.tasks.loader",
    "load_tasks": "fireflash.tasks.loader",
}
__all__ = ["TaskLoadError", "bundled_tasks", "load_task", "load_tasks"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fireflash.tasks' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
