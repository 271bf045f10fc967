"""A small root helper process that lives inside one cgroup slot and forks sandbox processes.

Why: joining a v1 memory cgroup costs one RCU grace period (5-15 ms measured here) per process, while a
forked child inherits its parent's cgroups for free. So each slot has one launcher that joined the
slot's cgroups once; every sandbox process of that slot is forked by it. The launcher also keeps a
fresh, empty network namespace (only loopback, up) ready for the next sandbox, so creating one is off
the critical path too.

Run as a script with the standard library only (``python -I launcher.py PROCS_FILE...``): it must
start fast and must not import the ``fireflash`` package. It reads requests from fd 0 (an AF_UNIX
SOCK_SEQPACKET socket): a JSON message plus file descriptors (SCM_RIGHTS); it answers ``{"pid": N}``
or ``{"error": "..."}``. Requests:

    box   fds [stdin, ctl, info, err]: mount the sandbox's disk (``disk``: an ext4 image copied to ``disk_copy``)
          or a tmpfs, and the overlay, in a new private mount namespace, bind each ``ro_mounts`` pair
          (host directory, path inside) read-only into it, drop to the sandbox uid, exec bwrap (argv
          given). With ``userns`` (an image-backed sandbox) it first
          makes the sandbox's two user namespaces, whose many-id maps only root may write
          (``linux.userns_pair``), and hands them to bwrap as fds 6 and 7 (``--userns 6 --userns2 7``).
    join  fds [stdin, ctl, err, net, user-owner, mnt, pid, ipc, uts, cgroup, (inner user)]: join a running
          sandbox's namespaces as the sandbox uid, exec the shell wrapper; ``caps`` (numbers) is the
          bounding set it keeps (image-backed sandboxes: root's capabilities, or none)

A failed fork is answered ``{"error": "...", "errno": N}``.
"""

from __future__ import annotations

import ctypes
import fcntl
import importlib.util
import json
import os
import resource
import signal
import socket
import struct
import sys
import time

_spec = importlib.util.spec_from_file_location(
    "_ff_linux", os.path.join(os.path.dirname(os.path.abspath(__file__)), "linux.py")
)
linux = importlib.util.module_from_spec(_spec)  # loaded by path: importing the package would be slow
_spec.loader.exec_module(linux)

CTL_FD = 5  # fd of the record pipe in sandbox processes (the shell wrapper moves it to 3)
INFO_FD = 4  # bwrap --info-fd
USERNS_FDS = (6, 7)  # bwrap --userns, --userns2 (image-backed sandboxes)
_SIOCSIFFLAGS = 0x8914
_IFF_UP_LOOPBACK_RUNNING = 0x1 | 0x8 | 0x40
_PR_SET_PDEATHSIG = 1


def _fresh_netns() -> None:
    """Move this process into a new network namespace with loopback up; its children inherit it."""
    linux.unshare(linux.CLONE_NEWNET)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", _IFF_UP_LOOPBACK_RUNNING))


def _move_fds(fds: list[int], targets: list[int]) -> None:
    """dup2 each fd onto its target number without clobbering a source that sits on a later target."""
    staged = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]  # above every target number
    for src, dst in zip(staged, targets):
        os.dup2(src, dst)
    low = 3  # close everything else: no fd of the launcher may leak into a sandbox
    for fd in sorted(t for t in targets if t >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def _box(req: dict, fds: list[int], host_net: int) -> None:
    """In the forked child: private mounts, limits, unprivileged uid, then exec bwrap."""
    stdin, ctl, info, err = fds
    if req["host_net"]:
        linux.setns(host_net, linux.CLONE_NEWNET)
    userns = req.get("userns")
    extra = list(linux.userns_pair(req["uid"], req["gid"], userns["base"], userns["size"])) if userns else []
    devnull = os.open("/dev/null", os.O_RDWR)
    _move_fds([stdin, devnull, err, info, ctl, *extra], [0, 1, 2, INFO_FD, CTL_FD, *USERNS_FDS[: len(extra)]])
    box = req["box"]
    linux.unshare(linux.CLONE_NEWNS)
    linux.make_mounts_private()
    if req.get("disk"):  # its own ext4 of storage_mb: a disk quota (disks.py); gone with this namespace
        linux.mount_disk(req["disk"], req["disk_copy"], box, linux.MS_NOSUID | linux.MS_NODEV)
        os.chmod(box, 0o755)
    else:
        linux.mount(
            "tmpfs", box, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"size={req['storage_mb']}m,mode=0755"
        )
    for name in ("upper", "work", "merged"):
        os.mkdir(f"{box}/{name}", 0o755)
    # the upper dir's root is the sandbox's "/": owned by the sandbox user (host userland), who may create
    # /tests, /solution...; or by the image's root, as the image's own "/" is
    os.chown(f"{box}/upper", *req["upper_owner"])
    options = f"lowerdir={req['lowerdir']},upperdir={box}/upper,workdir={box}/work,redirect_dir=off,index=off,metacopy=off"
    try:  # volatile (Linux 5.10+): no sync of the disk when the overlay goes, which close() would wait for
        linux.mount("overlay", f"{box}/merged", "overlay", linux.MS_NOSUID | linux.MS_NODEV,
                    options + (",volatile" if req.get("disk") else ""))
    except OSError:
        if not req.get("disk"):
            raise
        linux.mount("overlay", f"{box}/merged", "overlay", linux.MS_NOSUID | linux.MS_NODEV, options)
    # mounted as root: the sandbox user need not reach the host directory, and cannot make it writable
    for source, inside in req.get("ro_mounts") or []:
        linux.bind_read_only(source, f"{box}/merged", inside)
    _drop(req)
    os.execve(req["argv"][0], req["argv"], req["env"])


def _join(req: dict, fds: list[int]) -> None:
    """In the forked child: join a sandbox (network first, while still root), then exec the wrapper."""
    stdin, ctl, err, net, *ns = fds
    devnull = os.open("/dev/null", os.O_RDWR)
    targets = [0, 1, 2, CTL_FD, 6] + list(range(7, 7 + len(ns)))
    _move_fds([stdin, devnull, err, ctl, net, *ns], targets)
    linux.setns(6, 0)  # owned by the host's user namespace: needs root
    linux.set_no_new_privs()
    _drop(req)
    for fd in range(7, 7 + len(ns)):  # the sandbox uid owns the sandbox's user namespace
        linux.setns(fd, 0)
    if req.get("caps") is not None:  # entering the user namespaces gave every capability in them
        linux.limit_bounding_set(set(req["caps"]))
    os.execve(req["argv"][0], req["argv"], req["env"])


def _drop(req: dict) -> None:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("500")  # the OOM killer of the slot's cgroup picks sandbox processes before the launcher
    for which, value in req["rlimits"]:
        resource.setrlimit(which, (value, value))
    uid, gid = req["uid"], req["gid"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def _reap(*_: object) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _reap_all(timeout_sec: float = 5.0) -> None:
    """Before exiting, reap every child, so none is left as a zombie for the host's init."""
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.001)


def main(procs_files: list[str]) -> None:
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        return  # the parent died before we armed the signal
    sock = socket.socket(fileno=0)
    pid = str(os.getpid())
    for path in procs_files:
        with open(path, "w") as f:
            f.write(pid)
    host_net = os.open("/proc/self/ns/net", os.O_RDONLY)
    _fresh_netns()
    signal.signal(signal.SIGCHLD, _reap)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock.send(json.dumps({"ready": True}).encode())
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 32)
        except OSError:
            msg = b""
        if not msg:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _reap_all()
            return
        req = json.loads(msg)
        try:
            child = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            # EAGAIN: the slot's pids limit is full (the sandbox's own processes); the host can recover
            sock.send(json.dumps({"error": f"fork failed: {e}", "errno": e.errno}).encode())
            continue
        if child == 0:
            try:
                # exec keeps ignored signals and the mask: Python ignores SIGPIPE and SIGXFSZ at start-up, and
                # a sandbox inheriting that made `yes | head` report EPIPE instead of dying as it does anywhere else;
                # whatever started FireFlash may have ignored others (a CI runner's SIGHUP), so all start at default
                for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
                    try:
                        signal.signal(sig, signal.SIG_DFL)
                    except (OSError, ValueError):
                        pass  # a signal the C library reserves for itself
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                if req["kind"] == "box":
                    _box(req, fds, host_net)
                else:
                    _join(req, fds)
            except BaseException as e:  # noqa: BLE001 - report anything, then die
                os.write(2, f"fireflash sandbox {req['kind']} failed: {type(e).__name__}: {e}\n".encode())
            os._exit(127)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": child}).encode())
        if req["kind"] == "box" and not req["host_net"]:
            _fresh_netns()  # ready for the next sandbox (the old namespace lives on in its sandbox)


if __name__ == "__main__":
    main(sys.argv[1:])
