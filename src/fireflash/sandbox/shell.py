"""The persistent shell: one ``bash -s`` per sandbox, driven through two pipes (RECIPE.md §4, STYLE.md 10).

The host writes one line per command to the shell's stdin::

    __ff_run '<command>' '/tmp/.fireflash/out/7.log' '<marker>'; __ff_done $?

``__ff_run`` evals the command *in the shell itself* (so ``cd``, ``export`` and plain variables persist, as
in Claude Code's Bash) with stdin from /dev/null and stdout+stderr into the output file; every process the
command starts inherits ``MARKER_VAR=<marker>`` in its environment (a local of ``__ff_run``, so it never
enters the shell's saved exports), which finds the command's processes that left its process tree
(``setsid``, ``nohup``, a double fork) when its job is killed; ``__ff_done``
writes a record to fd 3, a pipe only the host reads. Records are four NUL-terminated fields:

    H <shell pid in the sandbox> '' ''       once, when the shell starts
    D <exit code> <cwd> <export -p text>     after each command
    X <exit status of bash> '' ''            the shell itself exited (``exit N`` in a command)

Output never flows through a pipe (streaming 50 MB through one while scanning for a sentinel is
quadratic, issue 3): the host reads the head and tail of the output file and its size.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from dataclasses import dataclass, field

OUTPUT_DIR = "/tmp/.fireflash"
"""Directory, inside every sandbox, holding one output file per command."""

MARKER_VAR = "__FF_CMD"
"""Environment variable naming the command (``<session token>.<n>``) that started a process (see PRELUDE)."""

# The shell's own definitions. fd 3 is closed around the command so no child (or daemon) holds the
# record pipe: end-of-file on it then means the shell and its wrapper are gone. SIGUSR1 aborts the
# running command (the host sends it on timeout, after killing the command's processes): bash runs
# the trap once the foreground child is dead and `return` leaves __ff_run; between commands it is ignored.
PRELUDE = r"""
__ff_run() {
  local -x __FF_CMD="$3"
  trap 'trap "" USR1; return 124' USR1
  [ -d "${2%/*}" ] || mkdir -p -- "${2%/*}" 2>/dev/null
  eval "$1" </dev/null >"$2" 2>&1 3>&-
}
__ff_done() { trap '' USR1; { printf 'D\0%s\0%s\0' "$1" "$PWD"; export -p; printf '\0'; } >&3; }
trap '' USR1
printf 'H\0%s\0\0\0' "$$" >&3
"""

# Runs one shell and reports how it exited; used for shells started after the first (restarts,
# background jobs), which join the sandbox's namespaces.
WRAPPER = r"""exec 3>&"$FF_CTL_FD" 2>/dev/null; eval "exec $FF_CTL_FD>&-"; unset FF_CTL_FD
/bin/bash --noprofile --norc -s 2>/dev/null; printf 'X\0%s\0\0\0' "$?" >&3"""

# pid 1 of a bwrap sandbox: starts the first shell, reports its exit, then only reaps orphans (bash
# reaps any child while it waits). Signals sent from inside the sandbox cannot kill a pid-1 process,
# so `kill -9 -1` by the agent kills shells, not the sandbox. The shell starts as a job under `set -m`:
# POSIX has a shell without job control start `&` jobs with SIGINT and SIGQUIT ignored, and a shell
# cannot undo what was ignored when it started, so every command of the sandbox ignored Ctrl-C's signal
# (`timeout -s INT` could not stop a program; a task testing its SIGINT handler timed out).
KEEPER = r"""exec 3>&"$FF_CTL_FD" 2>/dev/null; eval "exec $FF_CTL_FD>&-"; unset FF_CTL_FD
set -m; /bin/bash --noprofile --norc -s <&0 & shell=$!; set +m
exec 0</dev/null
trap '' TERM INT HUP
wait "$shell"; printf 'X\0%s\0\0\0' "$?" >&3; exec 3>&-
while :; do /bin/sleep 86400 & wait $!; done"""


class ShellDied(Exception):
    """The shell process went away (killed, or its pipes closed) before answering."""


@dataclass
class Record:
    kind: str  # 'H', 'D' or 'X'
    fields: tuple[str, str, str]


@dataclass
class ShellState:
    """What survives a shell restart: the working directory and the exported variables."""

    cwd: str
    exports: str = ""


def run_line(command: str, output_path: str, marker: str = "") -> bytes:
    """The stdin line that runs ``command`` with output to ``output_path`` (both inside the sandbox).

    ``marker`` becomes ``MARKER_VAR`` in the environment of every process the command starts.
    """
    quoted = " ".join(shlex.quote(x) for x in (command, output_path, marker))
    return f"__ff_run {quoted}; __ff_done $?\n".encode()


def restore_lines(state: ShellState) -> bytes:
    """Script that brings a new shell to ``state``; runs at top level so ``declare -x`` stays global."""
    script = (
        PRELUDE + f"{{ :\n{state.exports}\n}} >/dev/null 2>&1\ncd -- {shlex.quote(state.cwd)} 2>/dev/null\n"
    )
    return script.encode()


@dataclass
class Shell:
    """One bash process inside a sandbox.

    Args:
        stdin_fd: write end of the shell's stdin pipe (owned: closed by ``close``).
        ctl_fd: read end of the record pipe (fd 3 in the shell; owned).
        proc: the wrapper process the host spawned for this shell, for the backend to reap; None
            when a keeper or launcher started it.
    """

    stdin_fd: int
    ctl_fd: int
    proc: object | None = None
    ns_pid: int | None = None
    dead: bool = False
    _buf: bytearray = field(default_factory=bytearray)
    _fields: list[str] = field(default_factory=list)
    _waiters: list[asyncio.Future[Record]] = field(default_factory=list)
    _hello: asyncio.Future[int] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin reading records on ``loop``."""
        os.set_blocking(self.ctl_fd, False)
        self._hello = loop.create_future()
        loop.add_reader(self.ctl_fd, self._on_readable)

    async def hello(self) -> int:
        """Wait for the shell to start; its pid inside the sandbox. Raises ShellDied."""
        assert self._hello is not None
        return await self._hello

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self.ctl_fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._mark_dead()
            return
        self._buf += chunk
        while (end := self._buf.find(b"\0")) >= 0:
            self._fields.append(self._buf[:end].decode("utf-8", "replace"))
            del self._buf[: end + 1]
            if len(self._fields) == 4:
                kind, a, b, c = self._fields
                self._fields = []
                self._deliver(Record(kind, (a, b, c)))

    def _deliver(self, rec: Record) -> None:
        if rec.kind == "H":
            if self._hello is not None and not self._hello.done():
                self._hello.set_result(int(rec.fields[0]) if rec.fields[0].isdigit() else -1)
            self.ns_pid = int(rec.fields[0]) if rec.fields[0].isdigit() else None
            return
        if rec.kind == "X":
            self._mark_dead(rec)
            return
        if self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(rec)

    def _mark_dead(self, rec: Record | None = None) -> None:
        if self.dead:
            return
        self.dead = True
        try:
            asyncio.get_running_loop().remove_reader(self.ctl_fd)
        except (RuntimeError, ValueError, OSError):
            pass
        for fut in [self._hello, *self._waiters]:
            if fut is not None and not fut.done():
                if rec is not None and fut is not self._hello:
                    fut.set_result(rec)
                else:
                    fut.set_exception(ShellDied())
                    fut.exception()  # retrieved: an unawaited hello must not log a warning
        self._waiters.clear()

    async def send(self, data: bytes, expect_record: bool) -> asyncio.Future[Record] | None:
        """Write ``data`` to the shell; return a future for its next record if ``expect_record``.

        Raises:
            ShellDied: the shell is gone (broken pipe).
        """
        if self.dead:
            raise ShellDied()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Record] | None = None
        if expect_record:
            fut = loop.create_future()
            self._waiters.append(fut)
        try:
            if len(data) <= 16384:  # fits the pipe buffer of an idle shell: never blocks
                os.write(self.stdin_fd, data)
            else:
                await loop.run_in_executor(None, _write_all, self.stdin_fd, data)
        except (BrokenPipeError, OSError):
            self._mark_dead()
            raise ShellDied() from None
        return fut

    def close(self) -> None:
        """Close the pipes (the shell sees end-of-input and exits) and stop reading records."""
        self._mark_dead()
        for fd in (self.stdin_fd, self.ctl_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.stdin_fd = self.ctl_fd = -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def decode_preview(
    head: bytes, tail: bytes, size_bytes: int, output_path: str, not_kept: str = ""
) -> tuple[str, bool]:
    """Head + tail of a command's output as text (invalid UTF-8 → U+FFFD; binary never raises).

    Args:
        head: the first bytes of the file; tail: its last bytes (empty when ``head`` is the whole file).
        size_bytes: the file's size, bytes.
        output_path: the file's path inside the sandbox, named in the truncation marker.
        not_kept: why the file was deleted ('' when it is kept); the marker then says so instead of naming it.

    Returns:
        (preview text, whether it was truncated).
    """
    text_head = head.decode("utf-8", "replace").replace("\0", "\ufffd")
    if not tail:
        return text_head, False
    omitted = size_bytes - len(head) - len(tail)
    where = f"was not kept ({not_kept})" if not_kept else f"in {output_path}"
    marker = f"\n[... {omitted} bytes omitted; full output ({size_bytes} bytes) {where} ...]\n"
    return text_head + marker + tail.decode("utf-8", "replace").replace("\0", "\ufffd"), True
