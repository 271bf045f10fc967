"""An image's root filesystem as a plain directory: the read-only lower layer of an image-backed sandbox.

    rootfs = image_rootfs(tool, "localhost/fireflash/env:1f2e...", cache / "rootfs", uid_base=1_000_000_000)

The image is exported once (``create`` + ``export`` piped into ``tar``) into a directory keyed by its
image id and the uid base, and reused by every later sandbox and run. Measured on this host (trixie
minbase, 124 MB, 5.4k files): export 2-5 s, ownership shift 0.1 s; ``podman image mount`` takes 0.12 s
but is not used: mounting needs root (rootless podman mounts only inside ``podman unshare``), docker has
no image mount, a mount stays behind after the process exits, and its merged directory is itself an
overlay, so a fork on top would nest overlayfs.

Ownership is shifted (``shift_ownership``): a file the image gives to uid ``n`` (root: 0) belongs on the
host to ``uid_base + n``, for the 65,536 ids a sandbox's user namespace maps (``IMAGE_IDS``), as rootless
podman's storage does with /etc/subuid. A sandbox then maps ``0..65535`` inside onto exactly these host
ids (bwrap.py), so root inside owns the image's files without ever being host root, and no host uid
below ``uid_base`` (host root, the sandbox uid, any real user) is mapped. Without the shift the files
would belong to host uid 0, unmapped inside, and root inside could not write ``/usr`` even in its overlay.

The directory is never written through a sandbox (overlay lowers are read-only); ``/dev`` is left empty
(sandboxes mount their own). Nothing here knows about tasks.

Images on one base share their exports' files (issue 30): a new export is unpacked against the cached
export whose image shares the most leading layers, and every file identical there (bytes and metadata)
becomes a hard link to it instead of being written (rootfs_dedup.py). The cache is capped
(``sandbox.rootfs_cache_gb``): after a new export, exports no backend holds are evicted least recently used
first (rootfs_cache.py). Measured (``benchmarks/rootfs_cache.py``, 2026-12-03, 2 shared cores at load
average 15-26, three task images ``FROM localhost/fireflash/python:3.11`` + ``COPY app/`` of 200 KB):
before, 367.6 MB per export, 1,102.8 MB for the three; now 367.6 MB for the first and 6.9 MB for each
other, 381.3 MB in all (du, hard links once). Seconds per export, first/second/third: before 20.6/15.0/10.9,
now 18.6/10.7/7.8 (the files left out are compared, not written). The generator's 132 exports that filled
49 GB would take one full export per package's image plus a few MB per task.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
from pathlib import Path

from fireflash.sandbox.containers import ContainerCommandFailed, ContainerTool, ContainerToolMissing
from fireflash.sandbox.errors import SandboxError
from fireflash.sandbox.rootfs_cache import (
    RootfsHold,
    hold_export,
    pick_reference,
    record_and_evict,
    sidecar_path,
    write_sidecar,
)
from fireflash.sandbox.rootfs_dedup import extract_deduplicated

IMAGE_IDS = 65536
"""uids (and gids) 0..65535 of an image map onto host ids ``uid_base .. uid_base + 65535``."""


def rootfs_dir(image_id: str, cache_dir: Path, uid_base: int) -> Path:
    """Where the root filesystem of image ``image_id`` (sha256 hex), owned from ``uid_base`` up, is kept."""
    return cache_dir / f"{image_id.removeprefix('sha256:')[:32]}-u{uid_base}"


def shift_ownership(root: Path, uid_base: int) -> int:
    """Give every file under ``root`` (``root`` too) to ``uid_base + its uid`` and ``uid_base + its gid``.

    Setuid and setgid bits, which the kernel clears on chown, are set again; file capabilities
    (``security.capability``) are dropped by the chown and not restored (inside a user namespace the
    host-root ones would not apply anyway). POSIX ACL entries naming users keep their unshifted ids.

    Returns:
        The number of entries changed.

    Raises:
        SandboxError: a file's uid or gid is outside ``0..65535`` (the ids a sandbox maps); names the file.
    """
    count = 0
    seen: set[tuple[int, int]] = set()  # hard links: one inode, shifted once

    def shift(path: str) -> None:
        nonlocal count
        st = os.lstat(path)
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            if (st.st_dev, st.st_ino) in seen:
                return
            seen.add((st.st_dev, st.st_ino))
        if st.st_uid >= IMAGE_IDS or st.st_gid >= IMAGE_IDS:
            raise SandboxError(
                f"{path} is owned by {st.st_uid}:{st.st_gid}, outside the {IMAGE_IDS} ids an image-backed sandbox "
                "maps (0..65535); change its owner in the Dockerfile"
            )
        os.lchown(path, uid_base + st.st_uid, uid_base + st.st_gid)
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(path, stat.S_IMODE(st.st_mode))
        count += 1

    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            shift(os.path.join(parent, name))
    shift(str(root))
    return count


def image_facts(tool: ContainerTool, ref: str) -> tuple[str, list[str]]:
    """Id (sha256 hex) and layer digests (``RootFS.Layers``, base first) of local image ``ref``.

    Raises:
        ContainerCommandFailed: ``ref`` is not a local image.
    """
    data = json.loads(tool.run("image", "inspect", ref))[0]
    return data["Id"].removeprefix("sha256:"), list((data.get("RootFS") or {}).get("Layers") or [])


def image_rootfs(
    tool: ContainerTool, ref: str, cache_dir: Path, uid_base: int, timeout_sec: float = 1800.0
) -> Path:
    """The root filesystem of local image ``ref`` as a directory owned from ``uid_base`` up, exported on first use.

    Holds nothing: the export may be evicted by a later one (``hold_rootfs`` is what sandboxes use).
    Raises what ``hold_rootfs`` raises.
    """
    hold = hold_rootfs(tool, ref, cache_dir, uid_base, timeout_sec=timeout_sec)
    hold.release()
    return hold.path


def hold_rootfs(
    tool: ContainerTool, ref: str, cache_dir: Path, uid_base: int, cap_bytes: int = 0, timeout_sec: float = 1800.0
) -> RootfsHold:
    """The root filesystem of local image ``ref`` (exported, deduplicated and recorded on first use), held.

    While the returned hold is open (``RootfsHold.release``) no FireFlash process evicts the export.
    Concurrent callers are safe: each exports into its own temporary directory and the first rename wins.

    Args:
        cache_dir: parent of the per-image directories (FireFlash's: ``<cache>/images/rootfs``).
        uid_base: host uid (and gid) the image's root becomes (``sandbox.image_uid_base``).
        cap_bytes: after a new export, unheld exports are evicted, least recently used first, until the
            cache's disk bytes are at most this (``sandbox.rootfs_cache_gb``); 0: never.
        timeout_sec: limit of the export, seconds.

    Raises:
        ContainerCommandFailed: ``ref`` is not a local image, or the export failed (its output in the message).
        ContainerToolMissing: the tool cannot export (buildah alone).
        SandboxError: a file of the image is owned by an id above 65535.
    """
    if tool.kind == "buildah":
        raise ContainerToolMissing("buildah cannot export an image's files; install podman (make setup does)")
    image_id, layers = image_facts(tool, ref)
    target = rootfs_dir(image_id, cache_dir, uid_base)
    target.parent.mkdir(parents=True, exist_ok=True)
    hold = hold_export(target)
    if hold is None:
        raise SandboxError(f"{target}: evicted three times while waiting for its lock; is another process looping?")
    try:
        if not target.is_dir():
            added = _export(tool, ref, target, layers, uid_base, timeout_sec)
            if added is not None:
                write_sidecar(target, image_id, layers, uid_base)
                record_and_evict(cache_dir, added, cap_bytes)
        elif not sidecar_path(target).is_file():  # exported before sidecars existed: now a reference too
            write_sidecar(target, image_id, layers, uid_base)
    except BaseException:
        hold.release()
        raise
    return hold


def _finish(tree: Path, uid_base: int) -> None:
    os.chmod(tree, 0o755)
    shift_ownership(tree, uid_base)


def _export(tool: ContainerTool, ref: str, target: Path, layers: list[str], uid_base: int,
            timeout_sec: float) -> int | None:
    """Export ``ref`` into ``target``; the disk bytes it added, or None if another process's export won."""
    for stale in target.parent.glob(f"{target.name}.tmp-*"):  # an export killed halfway
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o755)
    container = tool.run("create", ref, "true").strip().splitlines()[-1]
    try:
        with tempfile.TemporaryFile() as export_err:
            export = subprocess.Popen(tool.argv("export", container), stdout=subprocess.PIPE, stderr=export_err)
            timer = threading.Timer(timeout_sec, export.kill)  # a hung export ends the stream, and the unpacking
            timer.start()
            ref_hold = pick_reference(target.parent, layers, uid_base, exclude=target)
            errors = ""
            try:
                added, _, errors = extract_deduplicated(
                    export.stdout, tmp, ref_hold.path if ref_hold else None, uid_base, _finish, timeout_sec
                )
            except (tarfile.TarError, OSError) as e:  # a malformed stream, a link that could not be made
                added, errors = 0, f"{type(e).__name__}: {e}"
            finally:
                timer.cancel()
                if ref_hold:
                    ref_hold.release()
                export.stdout.close()
                if export.poll() is None and errors:
                    export.kill()
                export.wait()
            export_err.seek(0)
            errors = (export_err.read().decode(errors="replace") + errors).strip()
        if export.returncode != 0 or errors:
            raise ContainerCommandFailed(tool.argv("export", container), export.returncode or 1, errors)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first: use its copy
            if not target.is_dir():
                raise
            return None
        return added
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(tool.argv("rm", "-f", container), capture_output=True, timeout=120, check=False)


def host_ids_in_range(uid_base: int, passwd: Path = Path("/etc/passwd"), subuid: Path = Path("/etc/subuid")) -> list[str]:
    """Host users, and /etc/subuid ranges, that overlap the ids ``uid_base .. uid_base + 65535``.

    A host user with one of these uids would own the user namespaces of image sandboxes (and could enter
    them); a subuid range would be shared with that user's rootless containers.
    """
    end = uid_base + IMAGE_IDS
    found = []
    for line in passwd.read_text().splitlines() if passwd.is_file() else []:
        fields = line.split(":")
        if len(fields) > 2 and fields[2].isdigit() and uid_base <= int(fields[2]) < end:
            found.append(f"user {fields[0]} (uid {fields[2]}, {passwd})")
    for line in subuid.read_text().splitlines() if subuid.is_file() else []:
        fields = line.split(":")
        if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            start, count = int(fields[1]), int(fields[2])
            if start < end and uid_base < start + count:
                found.append(f"{fields[0]}'s subordinate ids {start}..{start + count - 1} ({subuid})")
    return found
