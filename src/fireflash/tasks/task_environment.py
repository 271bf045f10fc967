"""A loaded task's ``TaskEnvironment``: its Dockerfile materialised on the host's userland (or kept for its image),
the task's overrides, and git history stripped beyond HEAD unless the task keeps it (tasks/git_strip.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fireflash.protocols import TaskEnvironment
from fireflash.tasks.dockerfile import NeedsContainerBackend, materialise_dockerfile
from fireflash.tasks.git_strip import KEEP_FIELD, STRIP_GIT
from fireflash.tasks.task_fields import TaskLoadError


def task_environment(
    dockerfile: Path,
    context: Path,
    overrides: dict[str, Any],
    where: str,
    keep_git_history: bool = False,
    images: bool = False,
) -> tuple[TaskEnvironment, dict[str, Any]]:
    """The task's environment on the host's userland (its Dockerfile materialised), and metadata; its last
    setup command strips git history beyond HEAD (``git_strip``) unless the task sets ``keep_git_history``,
    which ``extra`` then records for gate 5.

    Args:
        images: a Dockerfile that cannot be materialised is kept for its image (``TaskEnvironment.dockerfile``
            set, the reason in ``metadata['host_userland']``) instead of failing the load.
    """
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if dockerfile.is_file():
        try:
            docker = materialise_dockerfile(dockerfile, context)
        except NeedsContainerBackend as e:
            if not images:
                raise TaskLoadError(f"needs a container backend: {e}") from None
            fields.update(dockerfile=dockerfile)
            extra.update(dockerfile=str(dockerfile), host_userland=str(e))
        else:
            fields.update(
                workdir=docker.workdir if docker.workdir != "/" else "/app",
                files_dir=docker.files_dir,
                setup_commands=docker.setup_commands,
                env=docker.env,
            )
            extra.update(dockerfile=str(dockerfile), base_image=docker.base_image)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    if keep_git_history:
        extra[KEEP_FIELD] = True
    else:
        fields["setup_commands"] = [*fields.get("setup_commands", []), STRIP_GIT]
    try:
        return TaskEnvironment(**fields), extra
    except ValidationError as e:
        raise TaskLoadError(f"{where}: {e.errors()[0]['loc'][0]}: {e.errors()[0]['msg']}") from None
