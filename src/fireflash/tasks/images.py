"""A task's environment image: its ``docker_image``, or its Dockerfile built once and cached by content.

    record = task_image(Path("tasks/my-task"), cfg.sandbox)     # → ImageRecord (image, id, substitutions)

For a Harbor task (``task.toml`` + ``environment/Dockerfile``) or a Terminal-Bench-1 one (``Dockerfile``):

1. ``[environment] docker_image``, when it is in the local store or can be pulled, is the image.
2. Otherwise ``environment/Dockerfile`` is built with the host's builder (sandbox.image_builder), so the
   Dockerfile means what it means to docker: multi-stage, COPY anywhere, RUN as root writing anywhere.
   The tag is content-addressed (Dockerfile, build context, and the base-image map entries it uses):
   ``localhost/fireflash/env:<digest>``; an existing tag is a cache hit and nothing is rebuilt.
3. Each image the Dockerfile names (FROM, COPY --from) must be local or pullable; one that is neither
   and has an entry in ``sandbox.base_images`` is replaced by that local base (built once if it is
   one of FireFlash's, tasks/bases.py). Every substitution is printed and kept in the record and in the
   image's ``fireflash.substitutions`` label, so a cache hit reports it too. A missing image without an
   entry stops the build before it starts, naming the line and the fix.

4. What the task's ``tests/test.sh`` installs at test time (curl, uv, pytest: Terminal-Bench 2's verifiers)
   is staged on the image (tasks/verifier_staging.py); the record's ``image`` is then the staged one and
   ``verifier`` says what was staged and what could not be.

Builds get the host's CA bundle and pip configuration (tasks/image_build.py). This module says nothing
about how sandboxes use the image: that is sandbox/rootfs.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from fireflash.sandbox.config import SandboxConfig
from fireflash.sandbox.containers import ContainerTool, find_tool
from fireflash.tasks.bases import BaseBuildError, ensure_base
from fireflash.tasks.image_build import images_cache, run_build
from fireflash.tasks.image_refs import ImageUse, external_images, normalize, qualify
from fireflash.tasks.paths import TaskPaths
from fireflash.tasks.verifier_staging import VerifierStaging, stage_verifier

ENV_REPO = "localhost/fireflash/env"
SUBSTITUTIONS_LABEL = "fireflash.substitutions"
RECIPE_VERSION = "1"  # bump when the way images are built changes, so cached ones are rebuilt


class BaseSubstitution(BaseModel):
    """A Dockerfile's image replaced by a local one because it could not be pulled."""

    original: str = Field(description="The image as the Dockerfile names it (ARGs expanded).")
    replacement: str = Field(description="The local image used instead (sandbox.base_images).")
    line: int = Field(description="1-based line of the instruction in the Dockerfile.")
    instruction: str = Field(description="'FROM' or 'COPY --from'.")
    reason: str = Field(description="Why the original was not used: the pull's error.")


class ImageRecord(BaseModel):
    """What environment image a task got and how (STYLE.md 8); the gate report shows it."""

    schema_version: int = 1
    task_id: str
    task_dir: str
    image: str = Field(description="Reference sandboxes use: the docker_image or localhost/fireflash/env:<digest>.")
    image_id: str = Field(description="Full image id (sha256 hex).")
    source: Literal["docker_image", "dockerfile"]
    builder: str = Field(description="podman, buildah or docker.")
    content_digest: str | None = Field(None, description="sha256 of Dockerfile + context + base map entries used.")
    cached: bool = Field(description="True when nothing was built or pulled now.")
    build_sec: float = Field(0.0, description="Seconds spent building or pulling now (bases included).")
    log_path: str | None = Field(None, description="The build's full log.")
    substitutions: list[BaseSubstitution] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="Anything else the user should know.")
    verifier: VerifierStaging | None = Field(
        None, description="What tests/test.sh installs at test time, staged at build time (tasks/verifier_staging.py); "
        "when set, ``image`` is the staged image.")


class ImageBuildError(RuntimeError):
    """A task's image could not be had; names the task, the step's output (build log tail) and the fix."""

    def __init__(self, task_id: str, problem: str, fix: str, log_tail: str = "", log_path: Path | None = None) -> None:
        self.task_id, self.problem, self.fix, self.log_tail, self.log_path = task_id, problem, fix, log_tail, log_path
        shown = f"\nlast lines of {log_path}:\n{log_tail}" if log_tail else ""
        super().__init__(f"task {task_id}: {problem}{shown}\nfix: {fix}")


def task_image(
    task_dir: Path,
    cfg: SandboxConfig,
    tool: ContainerTool | None = None,
    say: Callable[[str], None] = print,
    on_line: Callable[[str], None] | None = None,
    rebuild: bool = False,
) -> ImageRecord:
    """The environment image of the task at ``task_dir``, pulled or built now if it is not yet local, with
    what its ``tests/test.sh`` installs at test time staged on it (tasks/verifier_staging.py).

    Args:
        cfg: the ``[sandbox]`` section (image_builder, base_images, image_pull_timeout_sec, image_build_timeout_sec).
        tool: the container tool; found from ``cfg.image_builder`` when None.
        say: receives one line per event the user must see (a pull, a substitution, a base being built, what
            was staged for the verifier and what could not be).
        on_line: receives every line of build output (progress).
        rebuild: build even when the content-addressed tag exists.

    Raises:
        ImageBuildError: no Dockerfile and no usable docker_image, an image that cannot be had, or a failed
            build (message: the task, the log's tail and path, the fix).
        ContainerToolMissing: no container tool (or not the configured one).
    """
    tool = tool or find_tool(cfg.image_builder)
    record = _task_image(task_dir, cfg, tool, say, on_line, rebuild)
    paths = TaskPaths(task_dir.resolve())
    staged = stage_verifier(record.task_id, record.image, record.image_id, paths.tests_dir, tool, say, on_line,
                            cfg.image_build_timeout_sec, rebuild)
    if staged is None:
        return record
    update = {"verifier": staged, "cached": record.cached and staged.cached,
              "build_sec": record.build_sec + (0.0 if staged.cached else staged.build_sec)}
    if staged.image != record.image:
        update |= {"image": staged.image, "image_id": tool.inspect(staged.image).id}
    return record.model_copy(update=update)


def _environment_table(paths: TaskPaths) -> dict:
    if not paths.config.is_file():
        return {}
    try:
        table = tomllib.loads(paths.config.read_text()).get("environment", {})
    except tomllib.TOMLDecodeError as e:
        raise ImageBuildError(paths.root.name, f"{paths.config}: not valid TOML ({e})", "fix the file") from None
    return table if isinstance(table, dict) else {}


def content_digest(dockerfile_text: str, context: Path, base_entries: dict[str, str]) -> str:
    """sha256 (hex) of the Dockerfile, every file of the build context (path, mode, bytes; symlink targets)
    and the base-image map entries the Dockerfile uses: the same inputs give the same tag."""
    h = hashlib.sha256(f"fireflash-image-v{RECIPE_VERSION}\0".encode())
    h.update(dockerfile_text.encode() + b"\0" + json.dumps(base_entries, sort_keys=True).encode() + b"\0")
    for root, dirs, files in os.walk(context):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            path = Path(root) / name
            st = path.lstat()
            h.update(f"{path.relative_to(context).as_posix()}\0{st.st_mode:o}\0".encode())
            h.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def _log_name(task_id: str) -> str:
    return re.sub(r"[^\w.-]", "_", task_id)[:80]


def base_map(cfg: SandboxConfig) -> dict[str, str]:
    """``sandbox.base_images`` with normalized keys (``docker.io/library/ubuntu`` → ``ubuntu:latest``); '' drops."""
    return {normalize(k): v for k, v in cfg.base_images.items()}


def _resolve(
    tool: ContainerTool, use: ImageUse, cfg: SandboxConfig, task_id: str, say: Callable[[str], None],
    on_line: Callable[[str], None] | None,
) -> tuple[str, BaseSubstitution | None]:
    """The image to build ``use`` with: itself when local, its registry name when pulled now, else the
    substitute from the base map (built first if it is one of FireFlash's bases), with its record.

    Raises:
        ImageBuildError: neither pullable nor in the base map, or the mapped base cannot be had.
    """
    if tool.exists(use.ref):
        return use.ref, None
    why = tool.pull(qualify(use.ref), cfg.image_pull_timeout_sec)
    if why is None:
        say(f"{task_id}: pulled {qualify(use.ref)}")
        return qualify(use.ref), None
    replacement = base_map(cfg).get(normalize(use.ref), "")
    if not replacement:
        raise ImageBuildError(
            task_id,
            f"{use.instruction} {use.ref} (Dockerfile line {use.line}) is not local and cannot be pulled ({why})",
            f"load the image with `{tool.kind} load`, or map it to a local one: "
            f"sandbox.base_images={{\"{normalize(use.ref)}\"=\"localhost/fireflash/debian:trixie\"}}",
        )
    if use.instruction != "FROM":
        raise ImageBuildError(
            task_id, f"COPY --from={use.ref} (Dockerfile line {use.line}) cannot be pulled ({why}); a base image "
            "cannot stand in for the files it copies", f"load {use.ref} with `{tool.kind} load` first")
    try:
        ensure_base(tool, replacement, say, on_line)
    except BaseBuildError as e:
        raise ImageBuildError(task_id, f"base {replacement} for FROM {use.ref}: {e}", "run `fireflash images bases`") from None
    say(f"{task_id}: FROM {use.ref} (line {use.line}) cannot be pulled; using {replacement} instead (sandbox.base_images)")
    return replacement, BaseSubstitution(original=use.ref, replacement=replacement, line=use.line,
                                         instruction=use.instruction, reason=why)


def _fix_for(tail: str, substitutions: list[BaseSubstitution], timed_out: bool) -> str:
    if timed_out:
        return "raise [environment] build_timeout_sec in task.toml (or sandbox.image_build_timeout_sec)"
    if "certificate verify failed" in tail or "CERTIFICATE_VERIFY_FAILED" in tail:
        return "the download failed certificate checks: set SSL_CERT_FILE on the host to the CA bundle its own tools use"
    if substitutions and re.search(r"Unable to locate package|has no installation candidate", tail):
        used = ", ".join(f"{s.original} → {s.replacement}" for s in substitutions)
        return (f"a package is not in the substituted base's archive ({used}): install the Debian package name, or "
                "map the FROM image to another local image in sandbox.base_images")
    return "fix the Dockerfile step shown above (the full log has every step)"


def _recorded(label: str | None) -> list[BaseSubstitution]:
    try:
        return [BaseSubstitution(**s) for s in json.loads(label or "[]")]
    except (ValueError, TypeError):
        return []


def _task_image(
    task_dir: Path,
    cfg: SandboxConfig,
    tool: ContainerTool,
    say: Callable[[str], None],
    on_line: Callable[[str], None] | None,
    rebuild: bool,
) -> ImageRecord:
    """``task_image`` before the verifier's staging."""
    paths = TaskPaths(task_dir.resolve())
    task_id = paths.root.name
    env = _environment_table(paths)
    start = time.monotonic()
    notes: list[str] = []
    docker_image = env.get("docker_image")
    if docker_image is not None and not isinstance(docker_image, str):
        raise ImageBuildError(task_id, f"{paths.config} [environment] docker_image = {docker_image!r} is not a string",
                              "write the image reference as a string")
    if docker_image:
        local = tool.exists(docker_image)
        image = docker_image if local else qualify(docker_image)
        why = None if local else tool.pull(image, cfg.image_pull_timeout_sec)
        if why is None:
            if not local:
                say(f"{task_id}: pulled {image}")
            return ImageRecord(task_id=task_id, task_dir=str(paths.root), image=image,
                               image_id=tool.inspect(image).id, source="docker_image", builder=tool.kind,
                               cached=local, build_sec=time.monotonic() - start)
        notes.append(f"docker_image {docker_image} is not local and cannot be pulled ({why}); built from the Dockerfile")
        say(f"{task_id}: {notes[-1]}")
    dockerfile, context = paths.dockerfile, paths.environment_dir
    if not dockerfile.is_file() and paths.tb1_dockerfile.is_file():
        dockerfile, context = paths.tb1_dockerfile, paths.root
    if not dockerfile.is_file():
        raise ImageBuildError(task_id, f"no {paths.dockerfile} and no usable [environment] docker_image in {paths.config}",
                              "add environment/Dockerfile, or set docker_image to an image that is local or pullable")
    text = dockerfile.read_text()
    uses = external_images(text)
    entries = {normalize(u.ref): base_map(cfg).get(normalize(u.ref), "") for u in uses}
    digest = content_digest(text, context, entries)
    tag = f"{ENV_REPO}:{digest[:32]}"
    log = images_cache() / "logs" / f"{_log_name(task_id)}-{digest[:12]}.log"
    if not rebuild and tool.exists(tag):
        info = tool.inspect(tag)
        subs = _recorded(info.labels.get(SUBSTITUTIONS_LABEL))
        for s in subs:
            say(f"{task_id}: FROM {s.original} (line {s.line}) was substituted by {s.replacement} (cached image)")
        return ImageRecord(task_id=task_id, task_dir=str(paths.root), image=tag, image_id=info.id, source="dockerfile",
                           builder=tool.kind, content_digest=digest, cached=True, substitutions=subs, notes=notes,
                           log_path=str(log) if log.is_file() else None)
    resolved = [(u, *_resolve(tool, u, cfg, task_id, say, on_line)) for u in uses]
    subs = [sub for _, _, sub in resolved if sub is not None]
    replacements = {u.line: image for u, image, _ in resolved if u.instruction == "FROM" and image != u.ref}
    timeout = float(env.get("build_timeout_sec") or cfg.image_build_timeout_sec)
    labels = {SUBSTITUTIONS_LABEL: json.dumps([s.model_dump() for s in subs])}
    done, build_notes = run_build(tool, text, replacements, context, tag, images_cache() / "build" / digest[:32], log,
                                  labels, on_line, timeout)
    if done.returncode != 0:
        why = f"timed out after {timeout:.0f} s" if done.timed_out else f"exited {done.returncode}"
        raise ImageBuildError(task_id, f"building {dockerfile} with {tool.kind} {why}",
                              _fix_for(done.tail, subs, done.timed_out), done.tail, log)
    return ImageRecord(task_id=task_id, task_dir=str(paths.root), image=tag, image_id=tool.inspect(tag).id,
                       source="dockerfile", builder=tool.kind, content_digest=digest, cached=False,
                       build_sec=time.monotonic() - start, log_path=str(log), substitutions=subs,
                       notes=notes + build_notes)
