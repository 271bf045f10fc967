"""The training pool: the tasks a run trains on, as curation leaves them (RECIPE.md §2-3).

``load_pool`` loads ``tasks.paths``, keeps the ids a difficulty probe's manifest kept (``probe.py``) and gives
each task its gate-6 calibration from its gate report (``gates.py``). It lives in curation, not in tasks'
loader, because it reads curation's outputs: tasks sit below curation (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
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
) -> list[Task]:
    """The training pool: every task under ``paths`` (``TasksConfig.paths``), restricted to the ids a
    probe manifest kept (RECIPE.md §2) when ``pool_manifest`` is set, with each task's gate-6 calibration
    (free checks earn no partial credit) applied from its gate report when ``gate_reports_dir`` is set;
    ``sandbox``, ``say`` as for ``load_task``.

    Raises:
        TaskLoadError: any task fails to load (training never starts on a silently smaller pool), no task
            is left after the manifest filter, or a pool task has no passing gate report.
    """
    kept = set(load_pool_manifest(pool_manifest)) if pool_manifest is not None else None
    tasks, errors = load_tasks(list(paths), sandbox, say, only=kept)
    if errors:
        raise TaskLoadError(f"{len(errors)} task(s) failed to load:\n" + "\n".join(errors))
    if kept is not None:
        tasks = [t for t in tasks if t.id in kept]
    if not tasks:
        where = f" kept by {pool_manifest}" if pool_manifest else ""
        raise TaskLoadError(f"no tasks{where} under {', '.join(map(str, paths))}; check tasks.paths")
    if gate_reports_dir is not None:
        apply_gate_reports(tasks, gate_reports_dir)
    return tasks
