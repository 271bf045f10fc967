"""Read-only filesystem layers stacked as overlayfs lower dirs, and the diff of an overlay upper dir.

A sandbox's files are ``upper (its own, writable) + lowers (read-only, shared)``:

    skeleton   mount points for the host's system dirs, /home/agent, /tmp       (one per backend)
    task       the task's files at its workdir, owned by the sandbox uid         (one per prepared parent)
    snapshot   a copy of a sandbox's upper dir, taken when it is forked          (one per fork point)

A fork stacks a snapshot of its parent's upper on the parent's lowers, so forking an attempt (for
grading) is as cheap as forking the task's parent, and the child never sees the parent's later writes.
Layers are reference counted and deleted when the last sandbox using them closes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fireflash.sandbox.errors import SandboxError

# Host top-level entries mounted read-only into every sandbox (when present on the host).
SYSTEM_DIRS = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(eq=False)  # compared by identity: two layers are never interchangeable
class Layer:
    path: Path
    refs: int = 0


def build_skeleton(path: Path, uid: int, gid: int, home: str, mount_points: list[str]) -> None:
    """Create the bottom layer: mount points (or the host's merged-/usr symlinks) and the home dir.

    Args:
        mount_points: extra absolute paths where read-only binds go (created as empty dirs).
    """
    path.mkdir(parents=True)
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            (path / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            (path / name).mkdir()
    for name in ("proc", "dev", "tmp", "run", "root"):
        (path / name).mkdir()
    for name in ("opt", "srv", "mnt"):  # the sandbox user installs things here (e.g. /opt/venv)
        (path / name).mkdir()
        os.chown(path / name, uid, gid)
    (path / "var" / "tmp").mkdir(parents=True)
    os.chmod(path / "var" / "tmp", 0o1777)
    home_dir = path / home.lstrip("/")
    home_dir.mkdir(parents=True)
    os.chown(home_dir, uid, gid)
    for point in mount_points:
        (path / point.lstrip("/")).mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)  # the sandbox's "/": its user may create top-level dirs (/tests, /solution)


def build_task_layer(path: Path, workdir: str, files_dir: Path | None, uid: int, gid: int) -> None:
    """The task's files copied to ``workdir`` inside ``path``, owned by the sandbox uid.

    Raises:
        SandboxError: ``files_dir`` is not a directory, or copying fails (message has cp's error).
    """
    target = path / workdir.lstrip("/")
    target.mkdir(parents=True)
    if files_dir is not None:
        if not Path(files_dir).is_dir():
            raise SandboxError(
                f"TaskEnvironment.files_dir {files_dir} is not a directory; fix the task's environment/"
            )
        # cp -a keeps modes, symlinks (as links) and timestamps; ownership is reset below
        done = subprocess.run(
            ["cp", "-a", "--", f"{files_dir}/.", str(target)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SandboxError(f"copying task files from {files_dir} failed: {done.stderr.strip()}")
    for root, dirs, files in os.walk(target):
        os.lchown(root, uid, gid)
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def snapshot_upper(upper: str, path: Path) -> bool:
    """Copy an overlay upper dir (whiteouts and opaque-dir xattrs included) into a new layer at ``path``.

    Returns:
        False (and creates nothing) when the upper dir is empty.

    Raises:
        SandboxError: the copy failed.
    """
    if not os.listdir(upper):
        return False
    path.mkdir(parents=True)
    done = subprocess.run(
        ["cp", "-a", "--preserve=all", "--", f"{upper}/.", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        raise SandboxError(f"snapshot of {upper} failed: {done.stderr.strip()}")
    return True


def _opaque(path: str) -> bool:
    try:
        return os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def diff_upper(upper: str, lowers: list[Path]) -> list[str]:
    """Sandbox paths changed in an overlay ``upper`` dir relative to its ``lowers`` (RECIPE.md §3, §5).

    Lists every file, symlink and deleted path (whiteout) in the upper dir, and directories that are
    new or were replaced (opaque); a directory that was merely copied up is not listed.

    Returns:
        Sorted absolute paths as seen inside the sandbox.
    """
    changed: list[str] = []
    for root, dirs, files in os.walk(upper):
        rel_root = os.path.relpath(root, upper)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            changed.append(_inner(rel_root, name))
        for name in dirs:
            full = os.path.join(root, name)
            if os.path.islink(full):
                continue
            rel = os.path.normpath(os.path.join(rel_root, name))
            if _opaque(full) or not any((lower / rel).is_dir() for lower in lowers):
                changed.append(_inner(rel_root, name))
    return sorted(changed)


def _inner(rel_root: str, name: str) -> str:
    return os.path.normpath(os.path.join("/", rel_root, name))
