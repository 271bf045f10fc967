"""Read-only filesystem layers stacked as overlayfs lower dirs, and the diff of an overlay upper dir.

A sandbox's files are ``upper (its own, writable) + lowers (read-only, shared)``:

    skeleton   mount points for the host's system dirs, /home/agent, /tmp       (one per backend)
    task       the task's files at its workdir, owned by the sandbox uid         (one per prepared parent)
    snapshot   a copy of a sandbox's upper dir, taken when it is forked          (one per fork point)

or, for a task that runs in its image, ``upper + snapshots + task (when it has a files dir) + image
skeleton (mount points the image lacks and, when its own is empty, a container's /etc/hosts) + the
image's rootfs`` (rootfs.py; never deleted here).

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
    owned: bool = True  # False: not ours to delete when unused (an image's exported rootfs)


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


# What a container engine writes into every container's /etc/hosts (docker, podman): an exported image
# keeps only the empty placeholder the engine mounted over, so without it "localhost" does not resolve
# offline (Terminal-Bench tests fetch http://localhost:8080, ssh git@localhost, ...).
LOOPBACK_HOSTS = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def build_image_skeleton(path: Path, rootfs: Path, mount_points: list[str], uid: int, gid: int) -> bool:
    """Create the mount points (``/proc``, ``/dev``, ``/tmp`` and ``mount_points``) that ``rootfs`` lacks,
    and the ``/etc/hosts`` a container engine would give it (``LOOPBACK_HOSTS``) when the image's is missing
    or empty (issue 26: a container's "localhost" resolves; an image's own non-empty hosts file is kept).

    A directory the rootfs already has keeps its owner and mode here too: in an overlay the highest layer
    holding a directory gives it its attributes. New ones belong to ``uid:gid`` (the image's root), as does
    the hosts file (mode 0644).

    Returns:
        False (and creates nothing) when the rootfs has them all.
    """
    wanted = ["/proc", "/dev", "/tmp", *mount_points]
    missing = [p for p in wanted if not os.path.lexists(rootfs / p.lstrip("/"))]
    hosts = rootfs / "etc" / "hosts"
    # a symlinked hosts file (e.g. into /run) is the image's choice: left alone, as is an image without /etc
    need_hosts = (rootfs / "etc").is_dir() and not (rootfs / "etc").is_symlink() and (
        not os.path.lexists(hosts) or (hosts.is_file() and not hosts.is_symlink() and hosts.stat().st_size == 0)
    )
    if not missing and not need_hosts:
        return False
    path.mkdir(parents=True)
    for point in missing + (["/etc"] if need_hosts else []):
        rel = Path(point.lstrip("/"))
        for depth in range(1, len(rel.parts) + 1):
            part = Path(*rel.parts[:depth])
            if (path / part).is_dir():
                continue
            (path / part).mkdir()
            original = rootfs / part
            if original.is_dir() and not original.is_symlink():
                st = original.stat()
                os.chown(path / part, st.st_uid, st.st_gid)
                os.chmod(path / part, st.st_mode & 0o7777)
            else:
                os.chown(path / part, uid, gid)
                os.chmod(path / part, 0o1777 if str(part) == "tmp" else 0o755)
    if need_hosts:
        (path / "etc" / "hosts").write_bytes(LOOPBACK_HOSTS)
        os.chown(path / "etc" / "hosts", uid, gid)
        os.chmod(path / "etc" / "hosts", 0o644)
    return True


def build_task_layer(
    path: Path, workdir: str, files_dir: Path | None, uid: int, gid: int, rootfs: Path | None = None
) -> None:
    """The task's files copied to ``workdir`` inside ``path``, owned by the sandbox uid.

    Args:
        rootfs: the image's files below this layer, if any: directories it already has (``workdir`` and its
            parents) keep their owner and mode, so the layer does not change them.

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
    if rootfs is not None:  # the workdir and its parents: the image's attributes where it has them
        rel = Path(workdir.lstrip("/"))
        for depth in range(1, len(rel.parts) + 1):
            part = Path(*rel.parts[:depth])
            original = rootfs / part
            st = original.stat() if original.is_dir() and not original.is_symlink() else None
            os.chown(path / part, st.st_uid if st else uid, st.st_gid if st else gid)
            os.chmod(path / part, st.st_mode & 0o7777 if st else 0o755)  # a new one as mkdir makes it


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
