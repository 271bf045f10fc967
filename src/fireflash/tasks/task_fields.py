"""Reading a task's config fields (task.toml, task.yaml): ``TaskLoadError`` and the typed readers whose errors
name the file, the field and the fix (sizes in MiB, string lists, ``git_premise``)."""

from __future__ import annotations

import re
from typing import Any

from fireflash.tasks.git_strip import KEEP_FIELD, PREMISE_FIELD, PREMISE_KINDS

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


class TaskLoadError(ValueError):
    """A task directory is malformed; the message names the file, the field and the fix."""


def need(cond: bool, message: str) -> None:
    """Raise ``TaskLoadError(message)`` unless ``cond``; ``message`` names the file, the field and the fix."""
    if not cond:
        raise TaskLoadError(message)


def typed(table: dict[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    """``table[key]`` if it is one of ``kinds`` (a bool is never an int here), None if absent.

    Raises:
        TaskLoadError: the value has another type (``where`` names the file and table).
    """
    value = table.get(key)
    if value is None:
        return None
    bad = isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,))
    if bad or not isinstance(value, kinds):
        names = "/".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
        raise TaskLoadError(f"{where}: {key} = {value!r} must be {names}")
    return value


def megabytes(value: Any, where: str) -> int:
    """Harbor's ``memory``/``storage`` strings ('2G', '512M') or a number of MiB → MiB."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    m = _SIZE.match(str(value))
    need(m is not None, f"{where} = {value!r}: expected MiB as a number or a size like '2G' / '512M'")
    number, unit = float(m[1]), m[2].lower()
    return int(number * {"": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}[unit])


def str_list(value: Any, where: str) -> list[str]:
    """``value`` as a list of strings ([] for None). Raises ``TaskLoadError`` naming ``where`` otherwise."""
    if value is None:
        return []
    need(
        isinstance(value, list) and all(isinstance(v, str) for v in value),
        f"{where} must be a list of strings",
    )
    return list(value)


def git_premise(table: dict[str, Any], keep: bool, where: str) -> dict[str, Any]:
    """``git_premise``: the kinds of kept git history the task is built on (tasks/git_strip.py) → metadata."""
    kinds = str_list(table.get(PREMISE_FIELD), f"{where}: {PREMISE_FIELD}")
    bad = [k for k in kinds if k not in PREMISE_KINDS]
    need(not bad, f"{where}: {PREMISE_FIELD} = {kinds!r}: unknown kind(s) {bad}; use {list(PREMISE_KINDS)}")
    need(
        not kinds or keep,
        f"{where}: {PREMISE_FIELD} is set but {KEEP_FIELD} is not true: history is stripped, so there is no premise "
        f"to keep; set {KEEP_FIELD} = true too, or drop {PREMISE_FIELD}",
    )
    return {PREMISE_FIELD: kinds} if kinds else {}
