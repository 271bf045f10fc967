"""Per-sandbox memory / pids / CPU limits through cgroups (v2, v1, or none).

Hosts differ: pure cgroup v2; hybrid (memory, pids and cpu only as v1 controllers, as measured in
MEASURED.md); or no writable cgroups (a container). ``detect_mode`` picks one; with ``none`` the
backend falls back to rlimits (weaker: RLIMIT_NPROC counts every process of the sandbox uid).

Cgroups are created *under the cgroup this process already runs in* (per controller), so outer limits
still apply, and named per backend so parallel test processes never collide. They are reused across
sandboxes (see slots.py): joining a v1 memory cgroup costs an RCU grace period (5-15 ms measured).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _, opts = right.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((left.split()[4], fstype, set(opts.split(","))))
    return found


def _own_path(controller: str | None) -> str:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (None: the v2 hierarchy)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            if (controller is None and names == "") or (
                controller is not None and controller in names.split(",")
            ):
                return path
    return "/"


def v2_base() -> Path | None:
    """Directory of this process's v2 cgroup when it can delegate memory, pids and cpu; else None."""
    for mnt, fstype, _ in _mounts():
        if fstype != "cgroup2":
            continue
        base = Path(mnt + _own_path(None))
        try:
            available = set((base / "cgroup.controllers").read_text().split())
        except OSError:
            return None
        return base if set(CONTROLLERS) <= available and os.access(base, os.W_OK) else None
    return None


def v1_bases() -> dict[str, Path] | None:
    """Controller → directory of this process's v1 cgroup, when all three are mounted and writable."""
    bases = {}
    for mnt, fstype, opts in _mounts():
        if fstype != "cgroup":
            continue
        for c in CONTROLLERS:
            if c in opts and c not in bases:
                bases[c] = Path(mnt + _own_path(c))
    if set(bases) != set(CONTROLLERS) or not all(os.access(p, os.W_OK) for p in bases.values()):
        return None
    return bases


def detect_mode() -> str:
    """'v2', 'v1' or 'none' (see module docstring)."""
    if v2_base() is not None:
        return "v2"
    if v1_bases() is not None:
        return "v1"
    return "none"


@dataclass
class Cgroup:
    """One reusable cgroup (one directory per v1 controller, or one v2 directory)."""

    dirs: dict[str, Path]  # controller → dir (v2: the same dir for all)
    v2: bool

    @property
    def procs_files(self) -> list[str]:
        """Files a new process writes its pid to, to join this cgroup (distinct paths only)."""
        return sorted({str(d / "cgroup.procs") for d in self.dirs.values()})

    def configure(self, memory_mb: int, pids_max: int, cpus: float) -> None:
        """Set the limits for the next sandbox (RECIPE.md §1; values from the task's environment)."""
        quota_us = max(1000, int(cpus * CPU_PERIOD_US))
        mem = memory_mb * 1024 * 1024
        if self.v2:
            d = self.dirs["memory"]
            _write(d / "memory.max", str(mem))
            _write(d / "memory.swap.max", "0", optional=True)
            _write(d / "pids.max", str(pids_max))
            _write(d / "cpu.max", f"{quota_us} {CPU_PERIOD_US}")
            return
        m = self.dirs["memory"]
        # memsw must stay >= limit: lift it first, set it after
        _write(m / "memory.memsw.limit_in_bytes", "-1", optional=True)
        _write(m / "memory.limit_in_bytes", str(mem))
        _write(m / "memory.memsw.limit_in_bytes", str(mem), optional=True)
        _write(self.dirs["pids"] / "pids.max", str(pids_max))
        _write(self.dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(quota_us))

    def pids(self) -> list[int]:
        """Host pids in this cgroup."""
        seen: set[int] = set()
        for f in self.procs_files:
            try:
                seen.update(int(x) for x in Path(f).read_text().split())
            except OSError:
                pass
        return sorted(seen)

    def pids_current(self) -> int:
        """Processes (and threads) counted against this cgroup's pids limit now."""
        return int((self.dirs["pids"] / "pids.current").read_text())

    def kill_all(self, keep: int | None = None, timeout_sec: float = 5.0) -> bool:
        """SIGKILL every process but ``keep`` and wait until none is left; False if that took too long."""
        deadline = time.monotonic() + timeout_sec
        while pids := [p for p in self.pids() if p != keep]:
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0005)
        return True

    def remove(self) -> None:
        for d in set(self.dirs.values()):
            try:
                d.rmdir()
            except OSError:
                pass


def _write(path: Path, value: str, optional: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError:
        if not optional:
            raise


def remove_stale(alive: Callable[[int], bool]) -> None:
    """Remove cgroup trees ``fireflash-<pid>-…`` left by processes that died without closing their backend."""
    bases = v1_bases() or {}
    v2 = v2_base()
    for base in {*bases.values(), *([v2] if v2 else [])}:
        for tree in base.glob("fireflash-*"):
            pid = tree.name.split("-")[1]
            if not pid.isdigit() or alive(int(pid)):
                continue
            for slot in tree.glob("slot-*"):
                try:
                    slot.rmdir()
                except OSError:
                    pass
            try:
                tree.rmdir()
            except OSError:
                pass


class CgroupTree:
    """The directory of one backend's cgroups, under this process's own cgroup.

    Args:
        mode: 'v2' or 'v1' (from ``detect_mode``).
        name: unique directory name (e.g. ``fireflash-<pid>-<hex>``).

    Raises:
        OSError: the directories cannot be created (the message names what is missing).
    """

    def __init__(self, mode: str, name: str) -> None:
        self.v2 = mode == "v2"
        if self.v2:
            base = v2_base()
            if base is None:
                raise OSError(f"cgroup v2 with memory, pids and cpu is not delegated to {_own_path(None)}")
            self.roots = {c: base / name for c in CONTROLLERS}
            self.roots["memory"].mkdir()
            # a v2 cgroup holding no processes may enable controllers for its children
            _write(self.roots["memory"] / "cgroup.subtree_control", "+memory +pids +cpu")
        else:
            bases = v1_bases()
            if bases is None:
                raise OSError("cgroup v1 memory, pids and cpu controllers are not all mounted and writable")
            self.roots = {c: bases[c] / name for c in CONTROLLERS}
            for d in set(self.roots.values()):
                d.mkdir()
        self._count = 0

    def new(self) -> Cgroup:
        self._count += 1
        dirs = {c: root / f"slot-{self._count}" for c, root in self.roots.items()}
        for d in set(dirs.values()):
            d.mkdir()
        return Cgroup(dirs, self.v2)

    def remove(self) -> None:
        for d in set(self.roots.values()):
            try:
                d.rmdir()
            except OSError:
                pass
