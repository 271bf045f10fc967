"""Where a task's sandbox gets its userland: the host's own, or the task's image (``sandbox.task_images``).

    task = load_task(path, sandbox=cfg.sandbox)   # loads, then place(task, cfg.sandbox): image built if needed

- ``never``: every task runs on the host's userland with its Dockerfile materialised (tasks/dockerfile.py),
  as before images existed; a task that needs more is a load error.
- ``auto`` (default): a task runs in its image only when the host's userland cannot run it: a Dockerfile
  step that cannot be materialised (apt packages the host lacks, pinned pip installs, multi-stage builds,
  COPY outside the workdir, RUN writing /usr...), an ``[agent]``/``[verifier]`` ``user``, a
  ``docker_image`` with no Dockerfile, or a ``tests/test.sh`` that installs tools at test time (curl, uv,
  pytest: only an image-backed task gets them staged for the offline verifier, tasks/verifier_staging.py). Every other task, the bundled ones included, runs as before, and
  nothing here needs a container tool unless such a task is loaded.
- ``always``: every task with a Dockerfile or ``docker_image`` runs in its image (each built once).

A task placed in its image gets ``TaskEnvironment.image`` (its local reference, tasks/images.py) and the
image's own run configuration: ``ENV`` as its environment (task.toml's ``[environment.env]`` over it), ``WORKDIR`` as its workdir (task.toml's
``[environment] workdir`` wins), and its users: ``[agent] user`` / ``[verifier] user``, else the image's
``USER``, else root, which the sandbox maps to an unprivileged host uid (sandbox/bwrap.py). Its files come
from the image, so the materialised ``files_dir`` and ``setup_commands`` are dropped, except the git-history
strip (tasks/git_strip.py), which runs in the image-backed parent as on the host. What its test.sh
installs at test time is staged (``ImageRecord.verifier``): the staged image is its image and the staged
tools directory its ``verifier_tools``. The ``ImageRecord`` (substitutions, staging, build log) goes into
``metadata['image']`` for reports.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from fireflash.progress import Progress
from fireflash.protocols import Task
from fireflash.sandbox.config import SandboxConfig
from fireflash.sandbox.containers import ContainerTool, ContainerToolMissing, find_tool
from fireflash.tasks.git_strip import STRIP_GIT
from fireflash.tasks.images import ImageBuildError, _environment_table, task_image
from fireflash.tasks.loader import TaskLoadError
from fireflash.tasks.paths import TaskPaths
from fireflash.tasks.verifier_needs import verifier_needs


def host_blocker(task: Task) -> str | None:
    """Why the host's userland cannot run ``task`` as it asks (None: it can)."""
    env = task.environment
    if task.metadata.get("host_userland"):
        return str(task.metadata["host_userland"])
    for field, value in (("[agent] user", env.user), ("[verifier] user", env.verifier_user)):
        if value is not None:
            return f"it sets {field} = {value!r}, which only a sandbox forked from its image honours"
    if task.path is not None and not _dockerfile(task) and _environment_table(TaskPaths(task.path)).get("docker_image"):
        return "it names a docker_image and has no Dockerfile to run on the host's userland"
    if task.path is not None and _dockerfile(task):
        needs = verifier_needs(TaskPaths(task.path).test_script)
        if needs.needs_staging:
            return ("its tests/test.sh installs tools at test time (" + ", ".join(needs.covered[:2] or needs.unstaged[:1])
                    + "), which only its image can stage for the offline verifier")
    return None


def _dockerfile(task: Task) -> bool:
    if task.path is None:
        return False
    paths = TaskPaths(task.path)
    return paths.dockerfile.is_file() or paths.tb1_dockerfile.is_file()


def place(
    task: Task,
    cfg: SandboxConfig,
    say: Callable[[str], None] = print,
    find: Callable[[str], ContainerTool] | None = None,
) -> Task:
    """``task`` as ``cfg.task_images`` places it: unchanged (host userland) or in its image, built now if needed.

    Args:
        find: finds the container tool from ``cfg.image_builder`` (None: ``find_tool``; tests give a scripted one).

    Raises:
        TaskLoadError: the task needs its image and ``task_images`` is 'never', no container tool is
            installed, it has neither Dockerfile nor docker_image, or the image cannot be built (names the
            task, the reason and the fix).
    """
    blocker = host_blocker(task)
    has_image = _dockerfile(task) or bool(task.path and _environment_table(TaskPaths(task.path)).get("docker_image"))
    mode = cfg.task_images
    if mode == "never" and blocker is not None:
        raise TaskLoadError(
            f"task {task.id}: the host's userland cannot run it: {blocker}; it needs its image: set "
            "sandbox.task_images = 'auto' (with podman installed: make setup)"
        )
    if blocker is not None and not has_image:
        raise TaskLoadError(f"task {task.id}: {blocker}, and it has no Dockerfile or docker_image to build an image from")
    if mode == "never" or (mode == "auto" and blocker is None) or not has_image:
        return task
    why = blocker or "sandbox.task_images = 'always'"
    try:
        tool = (find or find_tool)(cfg.image_builder)
    except ContainerToolMissing as e:
        raise TaskLoadError(
            f"task {task.id} runs in its image ({why}), but {e}; or set sandbox.task_images = 'never' to skip it"
        ) from None
    try:  # a build can take minutes; a cached image is found at once and prints nothing
        with Progress(f"image for {task.id}", Console(), announce=False) as progress:
            record = task_image(task.path, cfg, tool, say, progress.line)
    except ImageBuildError as e:
        raise TaskLoadError(str(e)) from None
    info = tool.inspect(record.image)
    paths = TaskPaths(task.path)
    workdir = _environment_table(paths).get("workdir") if paths.config.is_file() else None
    image_env = dict(line.split("=", 1) for line in info.env if "=" in line)
    # task.toml's [environment.env] over the image's ENV (the loader merged it over the materialised Dockerfile's)
    declared = _environment_table(paths).get("env") if paths.config.is_file() else None
    if isinstance(declared, dict):
        image_env.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in declared.items()})
    environment = task.environment.model_copy(
        update={
            "image": record.image,
            "dockerfile": None,
            "files_dir": None,
            # the image holds what the Dockerfile's steps made; git history is still stripped (git_strip)
            "setup_commands": [c for c in task.environment.setup_commands if c == STRIP_GIT],
            "env": image_env,
            "workdir": workdir if isinstance(workdir, str) and workdir else info.workdir or "/",
            "user": task.environment.user or info.user or None,
            "verifier_user": task.environment.verifier_user or info.user or "root",
            "verifier_tools": Path(record.verifier.tools_dir) if record.verifier else None,
        }
    )
    metadata = {**task.metadata, "image": record.model_dump(mode="json"), "runs_in_image": why}
    return task.model_copy(update={"environment": environment, "metadata": metadata})
