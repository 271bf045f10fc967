"""The ``unsafe-local`` backend: plain subprocesses in a per-sandbox directory. NO isolation.

For debugging on machines without bubblewrap only; every start logs a warning. Commands run as the
calling user with full access to the host, its network and its files. Differences from ``bwrap``:

- Each sandbox is a host directory ``<root_dir>/local-…/boxes/<id>``; ``read_file`` / ``write_file`` and
  ``ExecResult.output_path`` address paths *inside* it (``/app/x`` is ``<box>/app/x``), and the shell
  starts in ``<box><workdir>`` with ``$FIREFLASH_SANDBOX_ROOT`` set to the box. Commands that use absolute
  paths such as ``/app`` see the host's paths instead.
- ``fork`` copies the whole directory (``cp -a``); ``diff`` compares against a manifest taken at fork.
- ``close`` kills the process groups of its shells; a daemon that calls ``setsid`` survives it.
- No memory, pids, CPU or disk limits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

from fireflash.protocols import ExecResult, Job, TaskEnvironment
from fireflash.sandbox import files as sbfiles
from fireflash.sandbox.config import SandboxConfig
from fireflash.sandbox.errors import SandboxClosed, SandboxError
from fireflash.sandbox.layers import build_task_layer
from fireflash.sandbox.session import ShellSession
from fireflash.sandbox.shell import WRAPPER, Shell, ShellDied, ShellState, restore_lines

log = logging.getLogger("fireflash.sandbox")
WARNING = "unsafe-local sandbox started: NO isolation (host files, network and processes are reachable); debugging only"

Manifest = dict[str, tuple]


def _manifest(box: Path) -> Manifest:
    """Relative path → (kind, size, mtime_ns, mode, link target) of every entry except /tmp."""
    found: Manifest = {}
    for root, dirs, names in os.walk(box):
        rel_root = os.path.relpath(root, box)
        if rel_root == "tmp":
            dirs.clear()
            continue
        for name in dirs + names:
            full = os.path.join(root, name)
            st = os.lstat(full)
            link = os.readlink(full) if os.path.islink(full) else ""
            found[os.path.normpath(os.path.join("/", rel_root, name))] = (
                st.st_mode >> 12,
                st.st_size,
                st.st_mtime_ns,
                st.st_mode,
                link,
            )
    found.pop("/tmp", None)
    return found


def _start_wrapper(stdin_r: int, ctl_w: int, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start a shell wrapper in its own session (so ``close`` can kill its process group)."""
    return subprocess.Popen(
        ["/bin/bash", "--noprofile", "--norc", "-c", WRAPPER],
        stdin=stdin_r,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(ctl_w,),
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


class LocalBackend:
    """Parents and forks as plain directories (see module docstring). Never use it for training."""

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg = cfg
        self.dir = Path(cfg.root_dir) / f"local-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        (self.dir / "boxes").mkdir(parents=True)
        self.sandboxes: set[LocalSandbox] = set()
        self._parents: dict[str, LocalSandbox] = {}
        self._ids = 0

    def new_box(self) -> Path:
        self._ids += 1
        return self.dir / "boxes" / str(self._ids)

    async def prepare(self, env: TaskEnvironment, name: str) -> LocalSandbox:
        """Build (or reuse) the parent for ``name``. Raises SandboxError as ``BwrapBackend.prepare`` does."""
        if env.dockerfile is not None:
            raise SandboxError(
                f"parent {name!r}: Dockerfile environments are not supported; use files_dir + setup_commands"
            )
        if env.image is not None or env.user is not None or env.verifier_user is not None:
            raise SandboxError(
                f"parent {name!r}: unsafe-local runs no images and no users (everything runs on the host as the "
                "calling user); use sandbox.backend = 'bwrap', or sandbox.task_images = 'never'"
            )
        parent = self._parents.get(name)
        if parent is not None and not parent.closed:
            return parent
        box = self.new_box()
        uid, gid = os.getuid(), os.getgid()
        await asyncio.get_running_loop().run_in_executor(
            None, build_task_layer, box, env.workdir, env.files_dir, uid, gid
        )
        (box / "tmp").mkdir()
        parent = LocalSandbox(self, env, box, _manifest(box))
        for command in env.setup_commands:
            result = await parent.exec(command, timeout_sec=self.cfg.setup_timeout_sec)
            if result.exit_code != 0:
                await parent.close()
                raise SandboxError(
                    f"parent {name!r}: setup command {command!r} exited {result.exit_code}:\n{result.preview[-2000:]}"
                )
        self._parents[name] = parent
        return parent

    async def close(self) -> None:
        """Close every sandbox and delete the backend's directory."""
        for sandbox in list(self.sandboxes):
            await sandbox.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class LocalSandbox:
    """A directory plus a persistent shell; implements ``fireflash.protocols.Sandbox`` without isolation."""

    def __init__(self, backend: LocalBackend, env: TaskEnvironment, box: Path, base: Manifest) -> None:
        log.warning(WARNING)
        self.backend = backend
        self.env = env
        self.box = box
        self.closed = False
        self._base = base
        self._root_fd = os.open(box, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._procs: list[subprocess.Popen] = []
        cfg = backend.cfg
        self._session = ShellSession(
            self._spawn_shell,
            lambda shell: shell.ns_pid,
            self._root,
            env.workdir,
            cfg.preview_chars,
            cfg.kill_grace_sec,
            host_prefix=str(box),
        )
        self._session.state = ShellState(cwd=f"{box}{env.workdir}")
        backend.sandboxes.add(self)

    def _root(self) -> int:
        if self.closed:
            raise SandboxClosed("sandbox is closed")
        return self._root_fd

    async def _spawn_shell(self, state: ShellState) -> Shell:
        self._root()
        stdin_r, stdin_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        env = (
            dict(os.environ)
            | dict(self.env.env)
            | {"FF_CTL_FD": str(ctl_w), "FIREFLASH_SANDBOX_ROOT": str(self.box)}
        )
        try:
            proc = _start_wrapper(stdin_r, ctl_w, self.box, env)
        finally:
            os.close(stdin_r)
            os.close(ctl_w)
        self._procs = [p for p in self._procs if p.poll() is None] + [proc]
        shell = Shell(stdin_w, ctl_r, proc=proc)
        shell.start(asyncio.get_running_loop())
        try:
            await shell.send(restore_lines(state), expect_record=False)
            async with asyncio.timeout(self.backend.cfg.start_timeout_sec):
                await shell.hello()
        except (TimeoutError, ShellDied, OSError) as e:
            shell.close()
            raise SandboxError(f"a local shell did not start ({type(e).__name__})") from None
        return shell

    async def exec(
        self,
        command: str,
        timeout_sec: float | None = None,
        background: bool = False,
        on_timeout: str = "kill",
    ) -> ExecResult:
        self._root()
        return await self._session.exec(command, timeout_sec, background, on_timeout)

    async def read_file(self, path: str) -> bytes:
        return sbfiles.read_bytes(self._root(), path, self._inner_cwd())

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        sbfiles.write_bytes(self._root(), path, data, mode, None, self._inner_cwd())

    def _inner_cwd(self) -> str:
        cwd = self._session.state.cwd
        return cwd[len(str(self.box)) :] or "/" if cwd.startswith(str(self.box)) else self.env.workdir

    async def fork(self, user: str | None = None, offline: bool = False) -> LocalSandbox:
        """A full copy of this sandbox's directory (slow: no copy-on-write without the bwrap backend).
        ``offline`` changes nothing: unsafe-local isolates nothing, the network included.

        Raises:
            SandboxError: ``user`` given (unsafe-local has one user, the caller).
        """
        self._root()
        if user is not None:
            raise SandboxError(f"fork(user={user!r}): unsafe-local runs everything as the calling user")
        box = self.backend.new_box()
        done = await asyncio.create_subprocess_exec(
            "cp", "-a", "--", str(self.box), str(box), stderr=subprocess.PIPE
        )
        _, err = await done.communicate()
        if done.returncode != 0:
            shutil.rmtree(box, ignore_errors=True)
            raise SandboxError(f"fork copy failed: {err.decode(errors='replace').strip()}")
        shutil.rmtree(box / "tmp", ignore_errors=True)
        (box / "tmp").mkdir()
        return LocalSandbox(self.backend, self.env, box, _manifest(box))

    async def jobs(self) -> list[Job]:
        self._root()
        return await self._session.jobs()

    async def kill_job(self, job_id: str) -> None:
        self._root()
        self._session.kill_job(job_id)

    async def diff(self) -> list[str]:
        """Paths created, changed or deleted since this sandbox was created (its /tmp excluded)."""
        self._root()
        now = _manifest(self.box)
        changed = {p for p, meta in now.items() if self._base.get(p) != meta and meta[0] != 0o04}
        changed |= {p for p, meta in now.items() if meta[0] == 0o04 and p not in self._base}
        changed |= set(self._base) - set(now)
        return sorted(changed)

    async def close(self) -> None:
        """Kill the shells' process groups and delete the directory. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._session.close()
        for proc in self._procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        os.close(self._root_fd)
        shutil.rmtree(self.box, ignore_errors=True)
        self.backend.sandboxes.discard(self)
