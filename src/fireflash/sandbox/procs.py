"""Processes from ``/proc``: trees, pid namespaces, environment markers, liveness (stdlib only).

- ``descendants`` / ``kill_tree``: a process tree from ``/proc`` (this kernel has no ``/proc/PID/children``).
- ``kill_pidns``: every process of a pid namespace but one (a sandbox that filled its pids limit).
- ``kill_marked``: every process whose environment holds a marker entry (a job's processes that left its tree).
- ``alive``, ``wait_dead``, ``count_processes_of``, ``host_pid_in_pidns``: what ``/proc`` says of given pids.
"""

from __future__ import annotations

import os
import signal
import time


def _parents() -> dict[int, int]:
    """pid → ppid of every process on the host."""
    table: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited while we looked
        # the command name may contain spaces and parentheses: ppid is the 2nd field after the last ')'
        table[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return table


def descendants(pid: int) -> list[int]:
    """Host pids of every live descendant of ``pid`` (not ``pid`` itself), parents before children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, stack = [], list(children.get(pid, []))
    while stack:
        p = stack.pop()
        found.append(p)
        stack.extend(children.get(p, []))
    return found


def _stop_and_kill(pids: list[int]) -> None:
    """SIGSTOP all of ``pids``, then SIGKILL them: stopped first, none can fork while the others die."""
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass


def kill_tree(pid: int, include_root: bool, rounds: int = 20) -> None:
    """SIGKILL every descendant of ``pid`` (and ``pid`` if ``include_root``), repeating while new ones appear.

    Descendants are stopped first so a fork loop cannot outrun the kill (a fork bomb is still bounded
    by the sandbox's pids limit). Processes that double-forked away from the tree are not found here
    (``kill_marked`` finds them by their environment); they die with the sandbox's pid namespace on ``close()``.
    """
    for _ in range(rounds):
        victims = descendants(pid) + ([pid] if include_root else [])
        if not victims:
            return
        _stop_and_kill(victims)
        if include_root and not _alive(pid):
            return


def pidns_members(pidns_link: str) -> list[int]:
    """Host pids of the live (not zombie) processes in the pid namespace ``pidns_link``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") == pidns_link and _alive(int(name)):
                found.append(int(name))
        except OSError:
            continue  # exited while we looked
    return found


def count_processes_of(uid: int) -> int:
    """Processes on the host owned by ``uid``, zombies included (what RLIMIT_NPROC counts)."""
    n = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                n += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                continue
    return n


def kill_pidns(pidns_link: str, keep: int, rounds: int = 20) -> None:
    """SIGKILL every process of the pid namespace ``pidns_link`` but host pid ``keep``, repeating while new ones appear.

    As in ``kill_tree``, each round stops what it finds before killing it, so a fork loop cannot outrun it;
    this also finds what ``kill_tree`` misses: processes that double-forked away and shells whose parent
    lives outside the namespace. The dead are reaped by their parents (``keep``, the namespace's pid 1,
    for orphans), which frees their pids shortly after this returns.
    """
    for _ in range(rounds):
        victims = [p for p in pidns_members(pidns_link) if p != keep]
        if not victims:
            return
        _stop_and_kill(victims)


def marked_processes(entry: bytes) -> list[int]:
    """Host pids of the live processes whose initial environment holds ``entry`` (``b"NAME=value"``) exactly.

    Reads ``/proc/PID/environ``: processes this process may not inspect (another user's, or non-dumpable
    ones) are skipped, and a process that cleared or rewrote its environment is not found.
    """
    needle = b"\0" + entry + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue  # exited, or not ours to read
        if needle in b"\0" + env + (b"" if env.endswith(b"\0") else b"\0") and _alive(int(name)):
            found.append(int(name))
    return found


def kill_marked(entry: bytes, rounds: int = 20) -> tuple[set[int], list[int]]:
    """SIGKILL every process whose environment holds ``entry`` (see ``marked_processes``), repeating while new ones appear.

    As in ``kill_tree``, each round stops what it finds before killing it, so a fork loop cannot outrun it.

    Returns:
        (the pids signalled, the marked pids still alive afterwards, e.g. unkillable in uninterruptible sleep).
    """
    signalled: set[int] = set()
    for _ in range(rounds):
        victims = marked_processes(entry)
        if not victims:
            return signalled, []
        if signalled.issuperset(victims):
            time.sleep(0.01)  # all killed already: give the kernel a moment to finish them before the next look
        signalled.update(victims)
        _stop_and_kill(victims)
    return signalled, marked_processes(entry)


def wait_dead(pids: set[int] | list[int], timeout_sec: float = 0.5) -> list[int]:
    """The ``pids`` still alive after up to ``timeout_sec`` seconds (a SIGKILLed process takes a moment to die)."""
    deadline = time.monotonic() + timeout_sec
    while True:
        left = sorted(p for p in pids if _alive(p))
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    return _alive(pid)


def host_pid_in_pidns(pidns_link: str, ns_pid: int) -> int | None:
    """Host pid of the process numbered ``ns_pid`` inside the pid namespace ``pidns_link``.

    Args:
        pidns_link: ``readlink /proc/PID/ns/pid`` of any process of that namespace (``'pid:[4026…]'``).
    """
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") != pidns_link:
                continue
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        if int(line.split()[-1]) == ns_pid:
                            return int(name)
                        break
        except (OSError, ValueError):
            continue
    return None
