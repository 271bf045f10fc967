"""The cache of exported root filesystems: who uses an export, which one to deduplicate against, and eviction.

    hold = hold_export(cache / "ab12...-u1000000000")    # shared lock; None if it is being evicted
    ref = pick_reference(cache, layers, uid_base)        # the export sharing the most leading layers
    evicted = record_and_evict(cache, added_bytes, cap_bytes)

Next to each export directory ``<name>`` lie ``<name>.lock`` and ``<name>.json``:

- ``<name>.lock``: a process using the export (a sandbox backend, for as long as it lives) holds a shared
  ``flock`` on it; eviction takes it exclusively without waiting and skips the export when it cannot. Its
  mtime is the export's last use (touched by every hold), the order of least-recently-used eviction. An
  export without one (made before this file existed) counts as used at time 0.
- ``<name>.json``: the image's layer digests (``RootFS.Layers``), by which a new export picks its
  reference for ``rootfs_dedup.extract_deduplicated``.

``usage.json`` holds the disk bytes of all exports, each inode counted once: a new export adds what it does
not share, an eviction subtracts what it frees (``rootfs_dedup.freed_bytes``), so no eviction walks the
whole cache. Where it is missing or unreadable it is measured again (``disk_bytes``); a process killed
between an export and its record leaves it low by that export until then. ``.cache.lock`` serialises
updates. Concurrent processes share the cache: exports are renamed into place (the first rename wins).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fireflash.sandbox.rootfs_dedup import disk_bytes, freed_bytes

EXPORT_NAME = re.compile(r"^[0-9a-f]{32}-u(\d+)$")
SCHEMA_VERSION = 1


@dataclass
class RootfsHold:
    """A shared lock on an export's lock file: while it is open the export is not evicted."""

    path: Path  # the export directory
    fd: int  # the open lock file; -1 once released

    def release(self) -> None:
        """Let the export be evicted again (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def lock_path(export: Path) -> Path:
    return export.with_name(export.name + ".lock")


def sidecar_path(export: Path) -> Path:
    return export.with_name(export.name + ".json")


def _open_locked(path: Path, flags: int) -> int | None:
    """An fd of lock file ``path`` locked with ``flags``, or None: not lockable now, or removed while waiting."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, flags)
        if os.fstat(fd).st_ino == os.stat(path).st_ino:
            return fd
    except (BlockingIOError, FileNotFoundError):  # locked elsewhere, or an eviction unlinked it meanwhile
        pass
    os.close(fd)
    return None


def hold_export(export: Path, wait: bool = True, touch: bool = True) -> RootfsHold | None:
    """A shared hold on ``export`` (its lock file created if missing), its use time touched if ``touch``.

    Returns None when ``wait`` is false and an eviction holds it, or when it was evicted while this waited;
    the hold is also given for an export that does not exist yet (so one being made cannot be evicted).
    """
    flags = fcntl.LOCK_SH if wait else fcntl.LOCK_SH | fcntl.LOCK_NB
    for _ in range(3):  # an eviction that unlinks the lock file under us: take the new one
        fd = _open_locked(lock_path(export), flags)
        if fd is not None:
            if touch:
                os.utime(fd)
            return RootfsHold(export, fd)
        if not wait:
            return None
    return None


def write_sidecar(export: Path, image_id: str, layers: list[str], uid_base: int) -> None:
    """Record the layers of the image ``export`` was made from (written whole, then renamed into place)."""
    data = {"schema_version": SCHEMA_VERSION, "image_id": image_id, "layers": layers, "uid_base": uid_base}
    tmp = sidecar_path(export).with_name(f"{export.name}.json.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data))
    tmp.rename(sidecar_path(export))


def _layers(export: Path) -> list[str]:
    try:
        return list(json.loads(sidecar_path(export).read_text())["layers"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def use_time(export: Path) -> float:
    """When ``export`` was last held (its lock file's mtime, seconds); 0 for one never held."""
    try:
        return os.stat(lock_path(export)).st_mtime
    except FileNotFoundError:
        return 0.0


def exports(cache_dir: Path) -> list[Path]:
    """The export directories in ``cache_dir`` (temporary and half-evicted ones left out)."""
    if not cache_dir.is_dir():
        return []
    return [p for p in cache_dir.iterdir() if EXPORT_NAME.match(p.name) and p.is_dir()]


def pick_reference(cache_dir: Path, layers: list[str], uid_base: int, exclude: Path) -> RootfsHold | None:
    """A hold on the export of the same ``uid_base`` whose image shares the most leading layers with ``layers``.

    Ties go to the most recently used; None when none shares the first layer or every candidate is being
    evicted. The caller releases the hold once it has linked against it.
    """
    candidates = []
    for export in exports(cache_dir):
        if export == exclude or EXPORT_NAME.match(export.name).group(1) != str(uid_base):
            continue
        theirs = _layers(export)
        shared = 0
        while shared < min(len(theirs), len(layers)) and theirs[shared] == layers[shared]:
            shared += 1
        if shared:
            candidates.append((shared, use_time(export), export))
    for _, _, export in sorted(candidates, reverse=True):
        hold = hold_export(export, wait=False, touch=False)  # a reference is not a use: LRU order unchanged
        if hold is not None and export.is_dir():
            return hold
        if hold is not None:
            hold.release()
    return None


@contextmanager
def _cache_locked(cache_dir: Path) -> Iterator[None]:
    fd = os.open(cache_dir / ".cache.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_usage(cache_dir: Path) -> int | None:
    try:
        value = json.loads((cache_dir / "usage.json").read_text())["bytes"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and value >= 0 else None


def _write_usage(cache_dir: Path, value: int) -> None:
    tmp = cache_dir / f"usage.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "bytes": value}))
    tmp.rename(cache_dir / "usage.json")


def evict(export: Path) -> int | None:
    """Remove ``export``, its lock file and sidecar unless it is held; returns the disk bytes freed, or None."""
    fd = _open_locked(lock_path(export), fcntl.LOCK_EX | fcntl.LOCK_NB)
    if fd is None:
        return None
    try:
        if not export.is_dir():
            return None
        gone = export.with_name(f"{export.name}.evict-{os.getpid()}")
        export.rename(gone)  # atomic: no one sees a half-removed export under its name
        sidecar_path(export).unlink(missing_ok=True)
        lock_path(export).unlink(missing_ok=True)
    finally:
        os.close(fd)
    return _remove(gone)


def _remove(tree: Path) -> int:
    freed = freed_bytes(tree)
    shutil.rmtree(tree)
    return freed


def record_and_evict(cache_dir: Path, added_bytes: int, cap_bytes: int) -> list[Path]:
    """Add a new export's ``added_bytes`` to the cache's usage, then evict unheld exports, least recently used
    first, until the usage is at most ``cap_bytes`` (0: no cap).

    Returns:
        The exports removed.
    """
    with _cache_locked(cache_dir):
        usage = _read_usage(cache_dir)
        for stale in cache_dir.glob("*.evict-*"):  # an eviction killed halfway
            pid = stale.name.rsplit("-", 1)[-1]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                freed = _remove(stale)
                usage = None if usage is None else max(usage - freed, 0)
        if usage is None:
            usage = disk_bytes(exports(cache_dir))  # the new export included
        else:
            usage += added_bytes
        evicted = []
        if cap_bytes > 0:
            for export in sorted(exports(cache_dir), key=use_time):
                if usage <= cap_bytes:
                    break
                freed = evict(export)
                if freed is not None:
                    usage = max(usage - freed, 0)
                    evicted.append(export)
        _write_usage(cache_dir, usage)
    return evicted
