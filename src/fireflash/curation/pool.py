"""The training pool: the tasks a run trains on, as curation leaves them (RECIPE.md §2-3).

``load_pool`` loads ``tasks.paths``, keeps the ids a difficulty probe's manifest kept (``probe.py``) and gives
each task its gate-6 calibration from its gate report (``gates.py``). It lives in curation, not in tasks'
loader, because it reads curation's outputs: tasks sit below curation (docs/architecture.md).

``load_mix_pool`` does the same per source of ``[tasks.mix]`` (issue 30) and tags each task with its source
(``metadata["source"]``, read by ``curation.mix.SourceMix``); a source left with no task is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fireflash.curation.gates import apply_gate_reports
from fireflash.curation.probe import load_pool_manifest
from fireflash.protocols import Task
from fireflash.sandbox.config import SandboxConfig
from fireflash.tasks.loader import TaskLoadError, load_tasks


def load_pool(
    paths: list[str],
    pool_manifest: str | Path | None = None,
    gate_reports_dir: str | Path | None = None,
    sandbox: SandboxConfig | None = None,
    say: Callable[[str], None] = print,
    field: str = "tasks.paths",
) -> list[Task]:
    """The training pool: every task under ``paths`` (``TasksConfig.paths``), restricted to the ids a
    probe manifest kept (RECIPE.md §2) when ``pool_manifest`` is set, with each task's gate-6 calibration
    (free checks earn no partial credit) applied from its gate report when ``gate_reports_dir`` is set;
    ``sandbox``, ``say`` as for ``load_task``; ``field``: the config field ``paths`` came from, for messages.

    Raises:
        TaskLoadError: any task fails to load (training never starts on a silently smaller pool), no task
            is left after the manifest filter, or a pool task has no passing gate report.
    """
    kept = set(load_pool_manifest(pool_manifest)) if pool_manifest is not None else None
    tasks, errors = load_tasks(list(paths), sandbox, say, only=kept)
    if errors:
        raise TaskLoadError(f"{field}: {len(errors)} task(s) failed to load:\n" + "\n".join(errors))
    if kept is not None:
        tasks = [t for t in tasks if t.id in kept]
    if not tasks:
        under = ", ".join(map(str, paths))
        if pool_manifest:
            raise TaskLoadError(f"{field}: no tasks kept by {pool_manifest} under {under}: none of its {len(kept or ())} "
                                "kept ids is there; probe these tasks into it (fireflash tasks probe) or check "
                                f"{field} and tasks.pool_manifest")
        raise TaskLoadError(f"{field}: no tasks under {under}; check {field}")
    if gate_reports_dir is not None:
        apply_gate_reports(tasks, gate_reports_dir)
    return tasks


def load_mix_pool(
    sources: Mapping[str, Sequence[str]],
    pool_manifest: str | Path | None = None,
    gate_reports_dir: str | Path | None = None,
    sandbox: SandboxConfig | None = None,
    say: Callable[[str], None] = print,
) -> list[Task]:
    """The training pool of a task mix: ``load_pool`` per source (name → its ``tasks.mix.<name>.paths``), each
    task's ``metadata["source"]`` set to its source's name.

    Raises:
        TaskLoadError: as ``load_pool``, naming the source (``tasks.mix.<name>.paths``): a task fails to load, the
            source has no task, or the manifest kept none of them; or one task id is in two sources.
    """
    pool: list[Task] = []
    owner: dict[str, str] = {}
    for name, paths in sources.items():
        field = f"tasks.mix.{name}.paths"
        for task in load_pool(list(paths), pool_manifest, gate_reports_dir, sandbox, say, field=field):
            if task.id in owner:
                raise TaskLoadError(f"task {task.id!r} is under both tasks.mix.{owner[task.id]}.paths and {field}; "
                                    "a task belongs to one source: remove it from one of them")
            owner[task.id] = name
            task.metadata["source"] = name
            pool.append(task)
    return pool
