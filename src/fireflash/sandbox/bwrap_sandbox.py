"""One bwrap sandbox: start, the Sandbox protocol, fork (with pre-started children), close.

The isolation it gives and how it starts are described in bwrap.py, which owns the backend.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import signal
from typing import TYPE_CHECKING

from fireflash.protocols import VERIFIER_TOOLS_DIR, ExecResult, Job, TaskEnvironment
from fireflash.sandbox import files as sbfiles
from fireflash.sandbox import procs
from fireflash.sandbox.errors import OutOfProcesses, SandboxClosed, SandboxError
from fireflash.sandbox.identity import Identity
from fireflash.sandbox.launcher import CTL_FD
from fireflash.sandbox.layers import Layer, diff_upper, snapshot_upper
from fireflash.sandbox.rootfs import IMAGE_IDS
from fireflash.sandbox.session import ShellSession
from fireflash.sandbox.shell import WRAPPER, Shell, ShellDied, ShellState, restore_lines
from fireflash.sandbox.slots import Slot
from fireflash.sandbox.startup import PATH, bwrap_argv, namespace_fds, sandbox_env

if TYPE_CHECKING:
    from fireflash.sandbox.bwrap import BwrapBackend


class BwrapSandbox:
    """One running sandbox (a task parent, an attempt, or a grading fork). Create with ``start``."""

    def __init__(
        self, backend: BwrapBackend, env: TaskEnvironment, lowers: list[Layer], depth: int, identity: Identity
    ) -> None:
        self.backend = backend
        self.env = env
        self.lowers = lowers
        self.depth = depth
        self.identity = identity
        self.closed = False
        self.box = str(backend.dir / "boxes" / backend.new_id())
        self._slot: Slot | None = None
        self._disk: str | None = None  # the ext4 image its writable layer is a copy of (disks.py); None: tmpfs
        self._mnt_ns = -1  # with a disk: its mount namespace, held so that close() need not wait for the unmount
        self._disk_root = -1  # with a disk: its root directory (linux.discard_disk at close)
        self._bwrap_pid = 0  # the bwrap process outside the sandbox: holds the overlay's mount namespace
        self._pidfd = -1
        self._init_pid = 0  # the keeper, pid 1 inside
        self._pidns = ""
        self._root_fd = -1
        self._err_fd = -1
        self._dirty = False
        self._snapshot: Layer | None = None
        self._prefork = backend.cfg.prefork if depth == 0 else 0  # attempts are forked once, for grading
        self._ready: list[BwrapSandbox] = []
        self._starting: set[asyncio.Task] = set()
        self.loop = asyncio.get_running_loop()
        cfg = backend.cfg
        self._session = ShellSession(
            self._spawn_shell,
            self._shell_host_pid,
            self._root,
            env.workdir,
            cfg.preview_chars,
            cfg.kill_grace_sec,
            output_budget_bytes=cfg.output_size_mb * 1024 * 1024 // 2,
            reclaim=self._kill_all_but_init,
        )

    @classmethod
    async def start(
        cls, backend: BwrapBackend, env: TaskEnvironment, lowers: list[Layer], identity: Identity, depth: int = 0
    ) -> BwrapSandbox:
        """Start a sandbox over ``lowers`` (top first) as ``identity``. Raises SandboxError with bwrap's message."""
        sandbox = cls(backend, env, lowers, depth, identity)
        backend.acquire(lowers)
        backend.sandboxes.add(sandbox)
        try:
            await sandbox._launch()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def _request(self, kind: str, argv: list[str], env: dict[str, str]) -> dict:
        me, base = self.identity, self.backend.cfg.image_uid_base
        return {
            "kind": kind,
            "argv": argv,
            "env": env,
            "uid": me.host_uid,
            "gid": me.host_gid,
            "rlimits": self.backend.rlimits(self.env),
            # a task's allow_internet is obeyed only when the user opted in (sandbox.allow_internet)
            "host_net": self.env.allow_internet and self.backend.cfg.allow_internet,
            # the verifier's staged tools: bound read-only by the launcher, as root (sandbox.bwrap docstring)
            "ro_mounts": [[str(self.env.verifier_tools), VERIFIER_TOOLS_DIR]] if me.image and self.env.verifier_tools else [],
            "box": self.box,
            "lowerdir": self.backend.lowerdir(self.lowers),
            "storage_mb": self.env.storage_mb,
            "disk": self._disk,  # an ext4 image to copy and mount as the box (disks.py); None: a tmpfs
            "disk_copy": self.backend.disks.scratch(f"{self.backend.dir.name}-{os.path.basename(self.box)}"),
            # "/" belongs to the image's root (as in the image), or to the host-userland sandbox user
            "upper_owner": [base, base] if me.image else [me.host_uid, me.host_gid],
            "userns": {"base": base, "size": IMAGE_IDS} if me.image else None,
            "caps": sorted(me.caps.values()) if me.image else None,
        }

    async def _launch(self) -> None:
        cfg, env = self.backend.cfg, self.env
        os.mkdir(self.box, 0o755)
        self._disk = self.backend.disks.template(env.storage_mb)
        self._slot = self.backend.pool.acquire(env.memory_mb, env.pids_max, env.cpus)
        stdin_r, stdin_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        info_r, info_w = os.pipe()
        err_r, err_w = os.pipe()
        self._err_fd = err_r
        try:
            self._bwrap_pid = await self._slot.launcher.spawn(
                self._request("box", bwrap_argv(self.backend, self.env, self.identity, self.box), {"PATH": PATH}),
                [stdin_r, ctl_w, info_w, err_w],
                cfg.start_timeout_sec,
            )
            self._pidfd = os.pidfd_open(self._bwrap_pid)
        except BaseException:
            for fd in (stdin_w, ctl_r, info_r):
                os.close(fd)
            raise
        finally:
            for fd in (stdin_r, ctl_w, info_w, err_w):
                os.close(fd)
        shell = Shell(stdin_w, ctl_r)
        shell.start(asyncio.get_running_loop())
        try:
            await shell.send(restore_lines(self._session.state), expect_record=False)
            async with asyncio.timeout(cfg.start_timeout_sec):
                await shell.hello()
            info = json.loads(os.read(info_r, 4096).decode())
        except (TimeoutError, ShellDied, OSError, ValueError) as e:
            shell.close()
            raise SandboxError(
                f"sandbox did not start ({type(e).__name__}): {self._stderr() or 'no message from bwrap'}"
            ) from None
        finally:
            os.close(info_r)
        self._init_pid = int(info["child-pid"])
        if self._disk is not None:
            self._mnt_ns = os.open(f"/proc/{self._bwrap_pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            # the disk itself, to discard its unwritten pages at close instead of writing them to its image
            self._disk_root = os.open(f"/proc/{self._bwrap_pid}/root{self.box}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._pidns = os.readlink(f"/proc/{self._init_pid}/ns/pid")
        # opened only after the shell answered, i.e. after bwrap switched to the sandbox's root
        self._root_fd = os.open(f"/proc/{self._init_pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        st, host = os.fstat(self._root_fd), os.stat("/")
        if (st.st_dev, st.st_ino) == (host.st_dev, host.st_ino):
            shell.close()
            raise SandboxError("sandbox root resolved to the host root; refusing to continue")
        self._session.adopt(shell)

    def _stderr(self) -> str:
        if self._err_fd < 0:
            return ""
        os.set_blocking(self._err_fd, False)
        try:
            return os.read(self._err_fd, 65536).decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def _root(self) -> int:
        if self.closed or self._root_fd < 0:
            raise SandboxClosed("sandbox is closed")
        return self._root_fd

    def _shell_host_pid(self, shell: Shell) -> int | None:
        if shell.ns_pid is None or not self._pidns:
            return None
        return procs.host_pid_in_pidns(self._pidns, shell.ns_pid)

    async def _spawn_shell(self, state: ShellState) -> Shell:
        """A new shell joined to this sandbox's namespaces (after ``exit``, a kill, or for a job)."""
        self._root()
        if not procs.alive(self._init_pid):
            raise SandboxError("the sandbox died (its pid 1 is gone); fork a new one")
        assert self._slot is not None
        try:
            ns_fds = namespace_fds(self._init_pid)
        except OSError as e:
            raise SandboxError(f"the sandbox died while starting a shell: {e}") from None
        stdin_r, stdin_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        err_r, err_w = os.pipe()
        env = sandbox_env(self.env, self.identity) | {"FF_CTL_FD": str(CTL_FD)}
        argv = ["/bin/bash", "--noprofile", "--norc", "-c", WRAPPER]
        try:
            await self._slot.launcher.spawn(
                self._request("join", argv, env),
                [stdin_r, ctl_w, err_w, *ns_fds],
                self.backend.cfg.start_timeout_sec,
            )
        except OutOfProcesses:
            for fd in (stdin_w, ctl_r, err_r):
                os.close(fd)
            raise OutOfProcesses(f"the sandbox reached its limit of {self.env.pids_max} processes") from None
        except BaseException:
            for fd in (stdin_w, ctl_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (*ns_fds, stdin_r, ctl_w, err_w):
                os.close(fd)
        shell = Shell(stdin_w, ctl_r)
        shell.start(asyncio.get_running_loop())
        try:
            await shell.send(restore_lines(state), expect_record=False)
            async with asyncio.timeout(self.backend.cfg.start_timeout_sec):
                await shell.hello()
        except (TimeoutError, ShellDied, OSError) as e:
            shell.close()
            os.set_blocking(err_r, False)
            try:
                why = os.read(err_r, 65536).decode("utf-8", "replace").strip()
            except OSError:
                why = ""
            # the launcher forked, but its child could not exec (RLIMIT_NPROC) or the wrapper not fork the shell
            if f"[Errno {errno.EAGAIN}]" in why or self._at_process_limit():
                raise OutOfProcesses(f"the sandbox reached its limit of {self.env.pids_max} processes") from None
            raise SandboxError(
                f"a new shell did not start in the sandbox ({type(e).__name__}): {why}"
            ) from None
        finally:
            os.close(err_r)
        return shell

    def _at_process_limit(self) -> bool:
        """Whether the sandbox's processes fill its pids limit (within the one a failed shell start may have freed)."""
        slot = self._slot
        if slot is not None and slot.cgroup is not None:
            try:
                in_use = slot.cgroup.pids_current() - 1  # the launcher counts too (Slot.configure)
            except (OSError, ValueError):
                return False
        else:  # rlimits: RLIMIT_NPROC counts the processes of the sandbox uid host-wide (bwrap.py)
            in_use = procs.count_processes_of(self.identity.host_uid)
        return in_use >= self.env.pids_max - 1

    async def _kill_all_but_init(self) -> None:
        """Kill every process of the sandbox but its pid 1 (the keeper, which reaps them): it filled its pids limit."""
        self._root()
        await asyncio.get_running_loop().run_in_executor(None, procs.kill_pidns, self._pidns, self._init_pid)

    # ── the Sandbox protocol ──

    async def exec(
        self,
        command: str,
        timeout_sec: float | None = None,
        background: bool = False,
        on_timeout: str = "kill",
    ) -> ExecResult:
        """Run ``command`` in the persistent shell; see ``fireflash.protocols.Sandbox.exec``.

        Raises:
            SandboxClosed: after ``close()``.  SandboxError: the sandbox died.
        """
        self._root()
        self._dirty = True
        return await self._session.exec(command, timeout_sec, background, on_timeout)

    async def read_file(self, path: str) -> bytes:
        """Bytes of ``path`` (absolute, or relative to the shell's cwd) inside the sandbox.

        Raises:
            FileNotFoundError, IsADirectoryError, PermissionError; SandboxClosed after ``close()``.
        """
        return await self.backend.run_io(
            self.identity, sbfiles.read_bytes, self._root(), path, self._session.state.cwd
        )

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Create or replace ``path`` with ``data`` (parents created), owned by the sandbox's user.

        Raises:
            OSError: EROFS for read-only system dirs, ENOSPC past the disk cap, ...; SandboxClosed.
        """
        root = self._root()
        self._dirty = True
        await self.backend.run_io(
            self.identity, sbfiles.write_bytes, root, path, data, mode, None, self._session.state.cwd
        )

    def _upper(self) -> str:
        # the bwrap process outside the sandbox still lives in the private namespace holding the overlay
        return f"/proc/{self._bwrap_pid}/root{self.box}/upper"

    async def fork(self, user: str | None = None, offline: bool = False) -> BwrapSandbox:
        """A new sandbox with this one's current files (copy-on-write), fresh processes and shell.

        The first fork after a change copies this sandbox's upper dir into a shared read-only layer;
        later forks with no change in between reuse it (forking a task parent costs no copy). A task
        parent keeps ``prefork`` children started in the background and hands one out at once.

        Args:
            user: the child's user (an image's user, as ``TaskEnvironment.user`` names one: the verifier's);
                None: this sandbox's. A user other than this sandbox's starts its child on demand.
            offline: the child gets no network even where this sandbox has it (grading forks); started on
                demand when this sandbox is online.

        Raises:
            SandboxError: ``user`` given for a host-userland sandbox, or not a user of the image.
        """
        self._root()
        identity = self.identity if user is None else self.backend.identity(self.env, user)
        if self._dirty or self._session.has_running_jobs():
            if self._snapshot is not None:
                self.backend.release([self._snapshot])
                self._snapshot = None
            layer = Layer(self.backend.dir / "layers" / f"snap-{self.backend.new_id()}")
            loop = asyncio.get_running_loop()
            if await loop.run_in_executor(None, snapshot_upper, self._upper(), layer.path):
                self._snapshot = layer
                self.backend.acquire([layer])  # held by this sandbox until it changes again or closes
            self._dirty = False
            await self._drop_ready()  # started over the old files
        loop = asyncio.get_running_loop()
        online = self.env.allow_internet and self.backend.cfg.allow_internet
        if identity != self.identity or (offline and online):
            env = self.env.model_copy(update={"allow_internet": False}) if offline else self.env
            return await BwrapSandbox.start(self.backend, env, self._child_lowers(), identity, self.depth + 1)
        while self._ready:
            child = self._ready.pop()
            if child.loop is loop:
                self._prestart()
                return child
            await child.close()  # started under another event loop: its pipes are read there
        child = await BwrapSandbox.start(self.backend, self.env, self._child_lowers(), identity, self.depth + 1)
        self._prestart()
        return child

    def _child_lowers(self) -> list[Layer]:
        return ([self._snapshot] if self._snapshot is not None else []) + self.lowers

    def _prestart(self) -> None:
        """Start children in the background so the next ``fork()`` returns at once (task parents only)."""
        wanted = self._prefork - len(self._ready) - len(self._starting)
        for _ in range(max(0, wanted)):
            task = asyncio.get_running_loop().create_task(self._start_ready(self._child_lowers()))
            self._starting.add(task)
            self.backend.tasks.add(task)
            task.add_done_callback(self._starting.discard)
            task.add_done_callback(self.backend.tasks.discard)
            # a failed start only means that the next fork starts its child itself
            task.add_done_callback(_ignore_failure)

    async def _start_ready(self, lowers: list[Layer]) -> None:
        child = await BwrapSandbox.start(self.backend, self.env, lowers, self.identity, self.depth + 1)
        if self.closed or lowers != self._child_lowers():
            await child.close()
        else:
            self._ready.append(child)

    async def _drop_ready(self) -> None:
        for task in list(self._starting):
            task.cancel()
        await asyncio.gather(*self._starting, return_exceptions=True)
        while self._ready:
            await self._ready.pop().close()

    async def jobs(self) -> list[Job]:
        self._root()
        return await self._session.jobs()

    async def kill_job(self, job_id: str) -> None:
        """Kill a background job and its whole process tree. Raises KeyError for an unknown id."""
        self._root()
        self._session.kill_job(job_id)

    async def diff(self) -> list[str]:
        """Paths (inside the sandbox) this sandbox created, changed or deleted relative to its parent."""
        self._root()
        return diff_upper(self._upper(), [layer.path for layer in self.lowers])

    async def close(self) -> None:
        """Kill every process, drop the overlay and tmpfs, free the cgroup and directories. Idempotent."""
        if self.closed:
            return
        self.closed = True
        await self._drop_ready()
        self._session.close()
        if self._init_pid:
            try:  # pid 1 of the namespace: the kernel kills the rest, bwrap reaps it and exits
                os.kill(self._init_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._pidfd >= 0:
            if not self._init_pid or not await _wait_exit(self._pidfd, 2.0):
                os.kill(self._bwrap_pid, signal.SIGKILL)  # bwrap never started the sandbox, or hangs
                if not await _wait_exit(self._pidfd, 10.0):
                    raise SandboxError(f"bwrap (pid {self._bwrap_pid}) did not exit 10 s after SIGKILL")
            os.close(self._pidfd)
            self._pidfd = -1
        if self._slot is not None:
            self.backend.pool.release(self._slot)
            self._slot = None
        for fd in (self._root_fd, self._err_fd):
            if fd >= 0:
                os.close(fd)
        self._root_fd = self._err_fd = -1
        if self._mnt_ns >= 0:  # the disk's unmount (and the loop device's detach) happens off this path
            self.backend.drop_disk(self._mnt_ns, self._disk_root, self.box)
            self._mnt_ns = self._disk_root = -1
        try:
            os.rmdir(self.box)
        except FileNotFoundError:
            pass
        except OSError:
            shutil.rmtree(self.box, ignore_errors=True)
        if self._snapshot is not None:
            self.backend.release([self._snapshot])
            self._snapshot = None
        self.backend.release(self.lowers)
        self.backend.sandboxes.discard(self)


def _ignore_failure(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at exit


async def _wait_exit(pidfd: int, timeout_sec: float) -> bool:
    """Wait until the process behind ``pidfd`` exited (then its mount namespace is gone); False on timeout."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(pidfd, lambda: done.done() or done.set_result(None))
    try:
        async with asyncio.timeout(timeout_sec):
            await done
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)
