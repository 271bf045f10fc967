"""Commands and background jobs on top of persistent shells; shared by every backend.

A backend supplies three things: how to start a shell in its sandbox (``spawn``), how to find a
shell's host pid (``host_pid``, to kill process trees) and a root directory fd for the output files.

Timeouts (RECIPE.md §4): with ``on_timeout='kill'`` every descendant of the shell is killed (the
command's whole tree, never just the shell); if the shell itself does not answer within
``kill_grace_sec`` (a shell builtin loop) it is killed too and a new one is started with the last
working directory and exported variables. With ``on_timeout='background'`` the busy shell becomes a
background job and the next command gets a new shell.

Killing a job (``kill_job``) kills its shell's process tree, then every process that carries the job's
marker in its environment (``shell.MARKER_VAR``: every command gets its own, ``<random session token>.<n>``),
so a server that left the tree by ``setsid``, ``nohup`` or a double fork dies with its job. A process that
cleared its environment (``env -i``) is not found this way; it dies with the sandbox on ``close()``. The
job's ``kill_report`` says what was killed and names any process that survived.

Out of processes: when a new shell cannot start because the sandbox's own processes fill its pids limit
(a fork bomb, thousands of leftover daemons), every process of the sandbox is killed (``reclaim``), as
an OOM killer would, and the new shell starts; the command's result says so. The agent pays for it (its
processes and background jobs are gone); it is not an infrastructure failure.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fireflash.protocols import ExecResult, Job
from fireflash.sandbox.errors import OutOfProcesses, SandboxError
from fireflash.sandbox.files import file_size, head_tail, remove_output
from fireflash.sandbox.procs import alive, descendants, kill_marked, kill_tree, wait_dead
from fireflash.sandbox.shell import (
    MARKER_VAR,
    OUTPUT_DIR,
    Record,
    Shell,
    ShellDied,
    ShellState,
    decode_preview,
    run_line,
)

SHELL_RESTARTED = "[the shell exited with status {status}; a new shell was started with the previous working directory and exported variables]"
RECLAIM_WAIT_SEC = 2.0  # how long a new shell may wait for killed processes to be reaped, seconds
OUT_OF_PROCESSES = (
    "[{why}: no new shell could start, so every process in the sandbox was killed (background jobs included) "
    "and a new shell was started with the previous working directory and exported variables]"
)


@dataclass
class _Job:
    job_id: str
    command: str
    output_path: str
    shell: Shell
    done: asyncio.Future[Record]
    marker: str
    killed: bool = False
    kill_report: str | None = None

    def exit_code(self) -> int | None:
        if self.killed or not self.done.done() or self.done.cancelled() or self.done.exception() is not None:
            return None
        rec = self.done.result()
        return _code(rec.fields[0])


def _code(text: str) -> int | None:
    return int(text) if text.lstrip("-").isdigit() else None


def _n(pids: set[int] | list[int]) -> str:
    return f"{len(pids)} process{'' if len(pids) == 1 else 'es'}"


def _join(*notes: str) -> str:
    return "\n".join(n for n in notes if n)


class ShellSession:
    """The persistent shell of one sandbox plus its background jobs.

    Args:
        spawn: starts a new shell in the sandbox at a given state (cwd, exports); raises SandboxError.
        host_pid: the host pid of a shell, or None if it is gone.
        root_fd: returns a directory fd acting as the sandbox's ``/`` (for output files).
        workdir: the initial working directory.
        preview_chars: head + tail characters returned inline.
        kill_grace_sec: wait for the shell after killing a timed-out command's tree, seconds.
        output_budget_bytes: when the output files of finished commands exceed this, the oldest are
            deleted, so a huge output cannot starve later commands (an output larger than the
            budget is deleted once its preview is returned: its ``ExecResult.output_kept`` is then False and
            the preview says the output was not kept instead of naming the file).
        host_prefix: prepended to output paths the *shell* writes to (the unsafe-local backend, whose
            shell sees the host's paths while files are addressed relative to the sandbox directory).
        reclaim: kills every process of the sandbox (its pid 1 excepted) when ``spawn`` raised
            ``OutOfProcesses``; None: the error propagates.
    """

    def __init__(
        self,
        spawn: Callable[[ShellState], Awaitable[Shell]],
        host_pid: Callable[[Shell], int | None],
        root_fd: Callable[[], int],
        workdir: str,
        preview_chars: int,
        kill_grace_sec: float,
        output_budget_bytes: int | None = None,
        host_prefix: str = "",
        reclaim: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._spawn = spawn
        self._host_pid = host_pid
        self._root_fd = root_fd
        self.state = ShellState(cwd=workdir)
        self._preview_bytes = max(1, preview_chars // 2)
        self._grace = kill_grace_sec
        self._shell: Shell | None = None
        self._jobs: dict[str, _Job] = {}
        self._counter = itertools.count(1)
        self._lock = asyncio.Lock()
        self._prefix = host_prefix
        self._reclaim = reclaim
        self._budget = output_budget_bytes
        self._outputs: list[tuple[str, int]] = []  # (path, bytes) of finished commands, oldest first
        # per-session, so a marker can never match another sandbox's processes (the local backend shares
        # the host's process table)
        self._token = secrets.token_hex(8)

    def adopt(self, shell: Shell) -> None:
        """Use ``shell`` (already started at ``self.state``) as the main shell."""
        self._shell = shell

    async def _main_shell(self) -> tuple[Shell, str]:
        """The main shell, started if needed, and a note for the command's result ('' or OUT_OF_PROCESSES)."""
        note = ""
        if self._shell is None or self._shell.dead:
            if self._shell is not None:
                self._shell.close()
            self._shell, note = await self._new_shell()
        return self._shell, note

    async def _new_shell(self) -> tuple[Shell, str]:
        """A shell at ``self.state``; when the sandbox is out of processes, reclaim them first (see module docstring).

        Raises:
            OutOfProcesses: still out of processes after the reclaim.  SandboxError: the shell did not start.
        """
        try:
            return await self._spawn(self.state), ""
        except OutOfProcesses as e:
            if self._reclaim is None:
                raise
            why = str(e)
        await self._reclaim()
        deadline = time.monotonic() + RECLAIM_WAIT_SEC
        while True:  # the killed processes free their pids once their parents reaped them
            try:
                return await self._spawn(self.state), OUT_OF_PROCESSES.format(why=why)
            except OutOfProcesses:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.02)

    async def exec(
        self, command: str, timeout_sec: float | None, background: bool, on_timeout: str
    ) -> ExecResult:
        """Run one command; see ``fireflash.protocols.Sandbox.exec``.

        Raises:
            ValueError: bad ``on_timeout``, a non-positive ``timeout_sec`` or a NUL byte in ``command``.
            SandboxError: the sandbox cannot start a shell.
        """
        if on_timeout not in ("kill", "background"):
            raise ValueError(f"on_timeout={on_timeout!r}: use 'kill' or 'background'")
        if "\0" in command:
            raise ValueError("command contains a NUL byte, which no shell can run")
        if timeout_sec is not None and timeout_sec <= 0:
            raise ValueError(f"timeout_sec={timeout_sec}: must be > 0 (or None for no limit)")
        n = next(self._counter)
        output_path = f"{OUTPUT_DIR}/{n}.log"
        started = time.monotonic()
        if background:
            job, note = await self._start_job(command, output_path, f"job-{n}", self._marker(n))
            return await self._result(None, output_path, started, job_id=job.job_id, note=note)
        async with self._lock:
            return await self._exec_foreground(command, output_path, timeout_sec, on_timeout, started, n)

    async def _exec_foreground(
        self,
        command: str,
        output_path: str,
        timeout_sec: float | None,
        on_timeout: str,
        started: float,
        n: int,
    ) -> ExecResult:
        note = ""
        for attempt in range(2):  # a shell found dead on write is replaced once
            shell, started_note = await self._main_shell()
            note = note or started_note
            try:
                done = await shell.send(
                    run_line(command, self._prefix + output_path, self._marker(n)), expect_record=True
                )
                break
            except ShellDied:
                if attempt:
                    raise SandboxError("the sandbox's shell died twice while receiving a command") from None
        assert done is not None
        try:
            # not asyncio.wait_for: on Python 3.11 it drops a cancellation that arrives as the record does
            async with asyncio.timeout(timeout_sec):
                rec = await asyncio.shield(done)
        except asyncio.CancelledError:
            # the caller gave up: the shell is still busy with this command, so the next command's
            # record would be this one's. Kill it all; the next exec starts a new shell.
            pid = self._host_pid(shell)
            if pid is not None:
                kill_tree(pid, include_root=True)
            shell.close()
            self._shell = None
            raise
        except TimeoutError:
            if on_timeout == "background":
                job = _Job(f"job-{n}", command, output_path, shell, done, self._marker(n))
                self._jobs[job.job_id] = job
                self._shell = None
                done.add_done_callback(lambda _f, s=shell: s.close())
                return await self._result(None, output_path, started, timed_out=True, job_id=job.job_id, note=note)
            await self._kill_command(shell, done)
            return await self._result(None, output_path, started, timed_out=True, note=note)
        except ShellDied:
            self._shell = None
            return await self._result(
                None, output_path, started, note=_join(note, SHELL_RESTARTED.format(status="unknown (killed)"))
            )
        if rec.kind == "X":
            self._shell = None
            return await self._result(
                _code(rec.fields[0]), output_path, started,
                note=_join(note, SHELL_RESTARTED.format(status=rec.fields[0])),
            )
        self.state = ShellState(cwd=rec.fields[1], exports=rec.fields[2])
        return await self._result(_code(rec.fields[0]), output_path, started, note=note)

    async def _kill_command(self, shell: Shell, done: asyncio.Future[Record]) -> None:
        """Abort the running command: kill its process tree and make the shell leave it (SIGUSR1).

        Repeated until the shell answers, since each SIGUSR1 leaves one shell-function level; a shell
        that does not answer within ``kill_grace_sec`` is killed and replaced.
        """
        pid = self._host_pid(shell)
        deadline = time.monotonic() + self._grace
        while pid is not None and time.monotonic() < deadline:
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                break
            kill_tree(pid, include_root=False)
            try:
                async with asyncio.timeout(0.05):
                    rec = await asyncio.shield(done)
            except TimeoutError:
                continue
            except ShellDied:
                break
            if rec.kind == "D":  # the shell is back at its prompt
                self.state = ShellState(cwd=rec.fields[1], exports=rec.fields[2])
                return
            break
        if pid is not None:
            kill_tree(pid, include_root=True)
        shell.close()
        self._shell = None

    def _marker(self, n: int) -> str:
        """The ``MARKER_VAR`` value of command ``n``."""
        return f"{self._token}.{n}"

    async def _start_job(self, command: str, output_path: str, job_id: str, marker: str) -> tuple[_Job, str]:
        shell, note = await self._new_shell()
        try:
            done = await shell.send(run_line(command, self._prefix + output_path, marker), expect_record=True)
        except ShellDied:
            shell.close()
            raise SandboxError(f"the shell for background job {job_id} died at start") from None
        assert done is not None
        job = _Job(job_id, command, output_path, shell, done, marker)
        done.add_done_callback(lambda _f: shell.close())
        self._jobs[job_id] = job
        return job, note

    async def _result(
        self,
        exit_code: int | None,
        output_path: str,
        started: float,
        timed_out: bool = False,
        job_id: str | None = None,
        note: str = "",
    ) -> ExecResult:
        root = self._root_fd()
        size, head, tail = head_tail(root, output_path, self._preview_bytes)
        kept = True
        if job_id is None and self._budget is not None:
            kept = self._collect_outputs(root, output_path, size)
        not_kept = "" if kept else f"it alone exceeds the sandbox's output budget of {self._budget:,} bytes"
        preview, truncated = decode_preview(head, tail, size, output_path, not_kept)
        if note:
            preview = f"{preview}\n{note}" if preview else note
        return ExecResult(
            exit_code=exit_code,
            output_path=output_path,
            output_size_bytes=size,
            preview=preview,
            preview_truncated=truncated,
            duration_sec=time.monotonic() - started,
            timed_out=timed_out,
            job_id=job_id,
            output_kept=kept,
        )

    def _collect_outputs(self, root: int, output_path: str, size: int) -> bool:
        """Record a finished command's output and delete the oldest outputs over budget.

        Returns:
            False when ``output_path`` itself was deleted (its result must then not name it as kept).
        """
        assert self._budget is not None
        self._outputs.append((output_path, size))
        total = sum(s for _, s in self._outputs)
        while self._outputs and total > self._budget:
            path, old = self._outputs.pop(0)
            remove_output(root, path)
            total -= old
            if path == output_path:
                return False
        return True

    async def jobs(self) -> list[Job]:
        """Every background job, running or finished, with its current output size (poll for new output)."""
        root = self._root_fd()
        out = []
        for job in self._jobs.values():
            size = file_size(root, job.output_path)
            out.append(
                Job(
                    job_id=job.job_id,
                    command=job.command,
                    output_path=job.output_path,
                    running=not job.done.done() and not job.killed,
                    exit_code=job.exit_code(),
                    output_size_bytes=size,
                    kill_report=job.kill_report,
                )
            )
        return out

    def kill_job(self, job_id: str) -> str:
        """Kill a job's shell, its whole process tree and every process that left the tree (see module docstring).

        Also sweeps a job that already finished, for the processes it left running (a daemonised server).

        Returns:
            What was killed, and any process that could not be: also kept as the job's ``kill_report``.

        Raises:
            KeyError: no such job (the message lists the known ids).
        """
        job = self._jobs.get(job_id)
        if job is None:
            raise KeyError(f"no background job {job_id!r}; jobs: {sorted(self._jobs) or 'none'}")
        finished = job.done.done() or job.killed
        ended = "was already stopped" if job.killed else "had already finished"
        tree: set[int] = set()
        pid = None if finished else self._host_pid(job.shell)
        if pid is not None:
            tree = {p for p in [pid, *descendants(pid)] if alive(p)}
            kill_tree(pid, include_root=True)
        if not finished:
            job.killed = True
            job.shell.close()
        signalled, left = kill_marked(f"{MARKER_VAR}={job.marker}".encode())
        escaped = signalled - tree
        left = sorted({*left, *wait_dead(tree)})
        if finished:
            what = (f"the job {ended}; killed {_n(escaped)} it left running (detached from its "
                    f"process tree, e.g. by setsid, nohup or a double fork)" if escaped else
                    f"the job {ended} and left no process running")
        else:
            what = f"killed its shell and {_n(tree - {pid})} in its process tree" if pid is not None else (
                "its shell was already gone")
            if escaped:
                what += f", and {_n(escaped)} that had left the tree (setsid, nohup or a double fork)"
        if left:
            what += f"; {_n(left)} could not be killed (host pids {', '.join(map(str, left))})"
        job.kill_report = what
        return what

    def has_running_jobs(self) -> bool:
        return any(not j.done.done() and not j.killed for j in self._jobs.values())

    def close(self) -> None:
        """Close every shell's pipes (processes are killed by the backend)."""
        if self._shell is not None:
            self._shell.close()
        for job in self._jobs.values():
            job.shell.close()
