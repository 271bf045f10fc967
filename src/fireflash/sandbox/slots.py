"""Slots: a reusable cgroup plus the launcher process living in it (see launcher.py for why).

A sandbox takes a slot for its lifetime: every process of the sandbox is forked by the slot's launcher
and so starts inside the slot's cgroup. On release the slot's cgroup is emptied (everything but the
launcher killed) and the slot waits for the next sandbox. Without cgroups (mode 'none') slots are
launchers only.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import subprocess
import sys
from pathlib import Path

from fireflash.sandbox.cgroups import Cgroup, CgroupTree
from fireflash.sandbox.errors import OutOfProcesses, SandboxError

LAUNCHER = str(Path(__file__).with_name("launcher.py"))


class Launcher:
    """Client of one launcher process (``python -I -S launcher.py``), started immediately.

    Requests are answered in order, one at a time: ``spawn`` holds a lock across send and reply and
    waits for the reply without blocking the event loop. A launcher that did not answer in time, or
    whose exchange was cancelled halfway, is marked ``broken``: its late answer would otherwise be
    read as the answer to the next request. Its slot is then retired, not reused.

    Raises:
        SandboxError: the launcher cannot be started.
    """

    def __init__(self, procs_files: list[str]) -> None:
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", LAUNCHER, *procs_files],
                stdin=theirs,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except OSError as e:
            self._sock.close()
            raise SandboxError(f"cannot start the sandbox launcher: {e}") from None
        finally:
            theirs.close()
        self._sock.setblocking(False)
        self._ready = False
        self._lock: asyncio.Lock | None = None
        self.broken = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def _recv(self, timeout_sec: float) -> dict:
        try:
            async with asyncio.timeout(timeout_sec):
                msg = await asyncio.get_running_loop().sock_recv(self._sock, 1 << 16)
        except (TimeoutError, OSError) as e:
            raise SandboxError(
                f"sandbox launcher did not answer within {timeout_sec:g} s ({type(e).__name__}){self._stderr()}"
            ) from None
        if not msg:
            raise SandboxError(f"sandbox launcher exited{self._stderr()}")
        return json.loads(msg)

    def _stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return ": " + self.proc.stderr.read().decode("utf-8", "replace").strip()[-2000:]

    async def spawn(self, request: dict, fds: list[int], timeout_sec: float) -> int:
        """Ask the launcher to fork a sandbox process; its host pid.

        Raises:
            OutOfProcesses: the launcher could not fork because its cgroup's pids limit is full.
            SandboxError: the launcher died, did not answer in ``timeout_sec``, or reported another failure.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.broken:
                raise SandboxError("sandbox launcher is out of step after an earlier failure")
            self.broken = True  # until the reply is read: a timeout or cancellation leaves it out of step
            if not self._ready:
                await self._recv(timeout_sec)  # the launcher's one-time {"ready": true}
                self._ready = True
            try:
                # a few hundred bytes on an idle SEQPACKET socket: never blocks
                socket.send_fds(self._sock, [json.dumps(request).encode()], fds)
            except OSError as e:
                raise SandboxError(f"sandbox launcher is gone ({e}){self._stderr()}") from None
            reply = await self._recv(timeout_sec)
            self.broken = False
        if reply.get("errno") == errno.EAGAIN:
            raise OutOfProcesses(f"sandbox launcher: {reply['error']}")
        if "error" in reply:
            raise SandboxError(f"sandbox launcher: {reply['error']}")
        return int(reply["pid"])

    def close(self) -> None:
        """End the launcher (it exits on end-of-file; a broken one is killed) and reap it."""
        self._sock.close()
        if self.broken:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class Slot:
    """A launcher and (unless cgroups are off) the cgroup it lives in."""

    def __init__(self, cgroup: Cgroup | None) -> None:
        self.cgroup = cgroup
        self.launcher = Launcher(cgroup.procs_files if cgroup else [])
        self._limits: tuple[int, int, float] | None = None

    def configure(self, memory_mb: int, pids_max: int, cpus: float) -> None:
        if self.cgroup is not None and self._limits != (memory_mb, pids_max, cpus):
            # the launcher itself counts as one process of the cgroup
            self.cgroup.configure(memory_mb, pids_max + 1, cpus)
            self._limits = (memory_mb, pids_max, cpus)

    def empty(self) -> bool:
        """Kill whatever the last sandbox left in the cgroup; True when only the launcher remains."""
        if self.cgroup is None:
            return True
        return self.cgroup.kill_all(keep=self.launcher.pid)

    def close(self) -> None:
        self.launcher.close()
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.remove()


class SlotPool:
    """Slots of one backend: a few started at once, more on demand, all reused.

    Args:
        tree: where cgroups are created, or None to run without cgroups.
        size: idle slots kept for reuse; at most 2 are started up front (each launcher is a Python
            process: starting eight at once would load a small machine for a second). More start
            on demand; beyond ``size`` idle ones, released slots are closed.
    """

    def __init__(self, tree: CgroupTree | None, size: int) -> None:
        self._tree = tree
        self._size = size
        self._free: list[Slot] = []
        self._all: list[Slot] = []
        for _ in range(min(size, 2)):
            self._free.append(self._new())

    def _new(self) -> Slot:
        slot = Slot(self._tree.new() if self._tree is not None else None)
        self._all.append(slot)
        return slot

    def acquire(self, memory_mb: int, pids_max: int, cpus: float) -> Slot:
        """A slot configured with these limits (RECIPE.md §1)."""
        slot = self._free.pop() if self._free else self._new()
        slot.configure(memory_mb, pids_max, cpus)
        return slot

    def release(self, slot: Slot) -> None:
        """Take a slot back after its sandbox closed; a slot that will not empty, or one too many, is retired."""
        usable = not slot.launcher.broken and slot.launcher.proc.poll() is None
        if slot.empty() and usable and len(self._free) < max(1, self._size):
            self._free.append(slot)
        else:
            slot.close()
            self._all.remove(slot)

    def close(self) -> None:
        for slot in self._all:
            slot.close()
        self._all.clear()
        self._free.clear()
        if self._tree is not None:
            self._tree.remove()
