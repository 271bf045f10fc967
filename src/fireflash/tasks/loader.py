"""Load task directories in the formats people already have: Harbor and Terminal-Bench 1.

    task = load_task("path/to/task")                  # one directory → fireflash.protocols.Task
    tasks, errors = load_tasks(["bundled:train", "my-tasks/"])   # never stops at the first bad task
    tasks, errors = load_tasks(paths, sandbox=cfg.sandbox)       # tasks that need it run in their image

Without ``sandbox`` every task runs on the host's userland (its Dockerfile materialised), and one that
cannot is a load error. With it, ``sandbox.task_images`` decides which tasks run in their own image
(tasks/environments.py), built on first use.

A path holding ``task.toml`` is a Harbor task, one holding ``task.yaml`` a Terminal-Bench-1 task; any
other directory is searched one level down for tasks. Bad directories raise ``TaskLoadError`` naming
the file and field and how to fix it (RECIPE.md §3: broken tasks must not enter the pool silently).
Each format is read in its own module (harbor.py, terminal_bench.py); this one finds task directories
(``bundled:SPLIT``, ``generated:N``, directories of tasks) and loads them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from fireflash.protocols import Task, cache_root
from fireflash.sandbox.config import SandboxConfig
from fireflash.tasks.harbor import load_harbor
from fireflash.tasks.task_fields import TaskLoadError, need
from fireflash.tasks.terminal_bench import load_terminal_bench

DATA_DIR = Path(__file__).parent / "data"
SPLITS = ("train", "heldout")


def is_task_dir(path: Path) -> bool:
    return (
        (path / "task.toml").is_file()
        or (path / "task.yaml").is_file()
        or (path / "instruction.md").is_file()
    )


def load_task(path: str | Path, sandbox: SandboxConfig | None = None, say: Callable[[str], None] = print) -> Task:
    """One task directory, Harbor (task.toml) or Terminal-Bench 1 (task.yaml) → ``Task``.

    Args:
        sandbox: when given, ``sandbox.task_images`` decides whether the task runs in its image
            (tasks/environments.py; the image is built now if it is not yet local). None: host userland only.
        say: receives the lines the user must see (an image built, a base substituted).

    Raises:
        TaskLoadError: not a directory, neither format, or malformed (the message names file and field); or
            the task needs its image and it cannot be had (no container tool, a failed build).
    """
    root = Path(path).resolve()
    need(root.is_dir(), f"{root}: not a directory; pass a task directory holding task.toml or task.yaml")
    images = sandbox is not None
    if (root / "task.yaml").is_file() and not (root / "task.toml").is_file():
        task = load_terminal_bench(root, images)
    else:
        task = load_harbor(root, images)
    if sandbox is None:
        return task
    from fireflash.tasks.environments import place  # it builds images: imported only when asked to

    return place(task, sandbox, say)


def _expand(spec: str | Path) -> list[Path]:
    text = str(spec)
    if text.startswith("bundled:"):
        split = text.removeprefix("bundled:")
        need(
            split in SPLITS,
            f"{text}: unknown bundled split; use one of {', '.join('bundled:' + s for s in SPLITS)}",
        )
        return sorted(p for p in (DATA_DIR / split).iterdir() if p.is_dir())
    if text.startswith("generated:"):
        return _generated(text)
    path = Path(text)
    if is_task_dir(path):
        return [path]
    need(path.is_dir(), f"{path}: no such directory")
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def task_dirs(spec: str | Path) -> list[Path]:
    """The task directories ``spec`` names (as in ``load_tasks``), without loading them.

    Raises:
        TaskLoadError: an unknown bundled split, a bad 'generated:' spec, or no such directory.
    """
    return _expand(spec)


def _generated(text: str) -> list[Path]:
    """'generated:N', 'generated:N:SEED' or 'generated:N:SEED:FAMILY,FAMILY,...' → N instances of every task
    family (tasks/families/), or of the named ones, written once under the cache directory and reused.
    Instance k of a family is the same task whichever families are named, so a filtered source extends
    an unfiltered one with the same seed (its first instances keep their ids and probe results)."""
    from fireflash.tasks.families.writer import write_tasks

    parts = text.split(":")[1:]
    ok = len(parts) in (1, 2, 3) and all(p.isdigit() for p in parts[:2]) and int(parts[0]) > 0
    families = sorted({f.strip() for f in parts[2].split(",") if f.strip()}) if len(parts) == 3 else []
    ok = ok and (len(parts) < 3 or bool(families))
    need(ok, f"{text}: expected 'generated:N', 'generated:N:SEED' or 'generated:N:SEED:FAMILY,...' with N > 0 "
              "instances per family")
    per_family, seed = int(parts[0]), int(parts[1]) if len(parts) >= 2 else 0
    name = f"n{per_family}-s{seed}"
    if families:
        name += "-f" + hashlib.sha256(",".join(families).encode()).hexdigest()[:12]
    try:
        return write_tasks(per_family, cache_root() / "generated" / name, seed, families)
    except ValueError as e:  # an unknown family name
        raise TaskLoadError(f"{text}: {e}") from None


def load_tasks(
    paths: list[str | Path],
    sandbox: SandboxConfig | None = None,
    say: Callable[[str], None] = print,
    only: set[str] | None = None,
) -> tuple[list[Task], list[str]]:
    """Load every task under ``paths`` (task dirs, dirs of tasks, 'bundled:SPLIT', or
    'generated:N[:SEED[:FAMILY,...]]', N instances of each (or each named) generated task family,
    ``fireflash.tasks.families``). ``sandbox`` and ``say``: as for ``load_task``; ``only``: skip task
    directories whose name (a task's id) is not in it, before loading (no image is built for them).

    Returns:
        (tasks, errors): one error string per bad task or path; the good ones load regardless.
    """
    tasks: list[Task] = []
    errors: list[str] = []
    for spec in paths:
        try:
            dirs = _expand(spec)
        except TaskLoadError as e:
            errors.append(str(e))
            continue
        split = str(spec).removeprefix("bundled:") if str(spec).startswith("bundled:") else None
        for d in dirs:
            if only is not None and d.name not in only:
                continue
            try:
                task = load_task(d, sandbox, say)
            except TaskLoadError as e:
                errors.append(str(e))
                continue
            if split:
                task.metadata["split"] = split
            tasks.append(task)
    return tasks, errors


def bundled_tasks(split: str) -> list[Task]:
    """The tasks shipped with FireFlash for ``split`` ('train' or 'heldout'), with ``metadata['split']`` set.

    Raises:
        TaskLoadError: unknown split, or a bundled task is malformed (a packaging bug).
    """
    tasks, errors = load_tasks([f"bundled:{split}"])
    if errors:
        raise TaskLoadError("bundled tasks are broken:\n" + "\n".join(errors))
    return tasks
