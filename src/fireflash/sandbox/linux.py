"""Thin Linux syscall wrappers the sandbox needs and Python's ``os`` lacks (ctypes, x86-64 / arm64).

- ``unshare`` / ``mount`` / ``setns``: build a private mount namespace holding a sandbox's overlay.
- ``open_in_root``: ``openat2(RESOLVE_IN_ROOT)``, so the host can read and write files *inside* a sandbox
  without following the sandbox's symlinks out of it (a link to ``/etc/shadow`` resolves to the
  sandbox's own ``/etc/shadow``, never the host's).
- ``userns_pair``: the two user namespaces of an image-backed sandbox, with a multi-id map only root can write.
- ``mount_disk`` / ``discard_disk``: a private copy of an ext4 image on a loop device that detaches itself (a
  sandbox's disk quota), and dropping its unwritten pages when the sandbox closes; ``fs_type`` of a path.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2

_SYS_OPENAT2 = 437  # same number on x86-64 and the generic (arm64) table
_OPENAT2_RETRIES = 64  # EAGAIN retries (see open_in_root)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_IN_ROOT = 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def unshare(flags: int) -> None:
    """unshare(2). Raises OSError."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int) -> None:
    """setns(2) into the namespace open at ``fd``. Raises OSError."""
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None
) -> None:
    """mount(2). Raises OSError naming the target."""
    ret = _libc.mount(_enc(source), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data))
    _check(ret, f"mount {fstype or ''} on {target}")


def fs_type(path: str) -> str:
    """Filesystem type of the mount holding ``path`` (longest mount-point prefix in mountinfo)."""
    path = os.path.realpath(path)
    best, fstype = "", "?"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = left.split()[4]
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, fstype = point, right.split()[0]
    return fstype


def _enc(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def bind_read_only(source: str, root: str, inside: str) -> None:
    """Bind host directory ``source`` read-only at ``inside`` of the tree at ``root`` (as root, before a sandbox
    starts). ``inside`` is resolved in ``root`` with no symlink allowed, so a link planted in a sandbox's files
    cannot aim the mount at a host path; a user namespace created later cannot make it writable (the kernel
    locks the flags of mounts it inherits).

    Raises:
        OSError: ``inside`` is missing, not a directory, or has a symlink on its path (ELOOP).
    """
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for flags in (MS_BIND | MS_REC, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV):
            # opened again for the remount: the first fd still names the directory under the new mount
            fd = open_in_root(root_fd, inside, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, no_symlinks=True)
            try:
                mount(source if flags & MS_REC else None, f"/proc/self/fd/{fd}", None, flags)
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)


def make_mounts_private() -> None:
    """Stop mounts made from here on from propagating back to the host namespace."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def open_in_root(root_fd: int, path: str, flags: int, mode: int = 0o644, no_symlinks: bool = False) -> int:
    """Open ``path`` resolved as if ``root_fd`` were ``/`` (symlinks and ``..`` cannot leave it).

    Args:
        root_fd: an open directory (e.g. of ``/proc/PID/root``) acting as the root.
        path: absolute or relative path inside that root.
        flags: ``os.O_*`` flags; ``O_CLOEXEC`` is always added.
        no_symlinks: fail (ELOOP) on any symlink in the path instead of resolving it inside the root.

    Returns:
        A new file descriptor.

    Raises:
        OSError: the usual open errors (ENOENT, EISDIR, EROFS, ...), with the inner path in the message.
    """
    resolve = _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS | (_RESOLVE_NO_SYMLINKS if no_symlinks else 0)
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
    # openat2 answers EAGAIN when a ".." was resolved while any mount or rename happened on the host (the
    # kernel cannot prove the walk stayed in the root); it asks the caller to retry, and other sandboxes
    # starting (overlay mounts) make that common under load
    for _ in range(_OPENAT2_RETRIES):
        ret = _libc.syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(root_fd),
            path.encode(),
            ctypes.byref(how),
            ctypes.c_size_t(24),
        )
        if ret >= 0:
            return ret
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            break
    raise OSError(err, os.strerror(err), path)


def openat2_available() -> bool:
    """True when the kernel has openat2 (Linux ≥ 5.6)."""
    try:
        os.close(open_in_root(os.open("/", os.O_PATH | os.O_DIRECTORY), ".", os.O_PATH))
    except OSError as e:
        return e.errno != errno.ENOSYS
    return True


def set_no_new_privs() -> None:
    """prctl(PR_SET_NO_NEW_PRIVS): exec can never gain privileges (setuid bits, file capabilities)."""
    _check(
        _libc.prctl(
            ctypes.c_int(38), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
        ),
        "prctl",
    )


# per-thread credential syscalls (glibc's wrappers would change every thread of the process)
_SYSCALLS = {
    "x86_64": {"setgroups": 116, "setfsuid": 122, "setfsgid": 123},
    "aarch64": {"setgroups": 159, "setfsuid": 151, "setfsgid": 152},
}


def drop_fs_identity(uid: int, gid: int) -> None:
    """Make the *calling thread* access files as ``uid``/``gid`` with no groups and no file capabilities.

    setfsuid from 0 to a non-zero uid clears CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and
    friends from the thread's effective set, so permission checks are exactly the sandbox user's.

    Raises:
        OSError: unsupported architecture, or the identity did not change.
    """
    import platform

    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(f"no per-thread credential syscalls known for {platform.machine()}")
    _check(_libc.syscall(ctypes.c_long(numbers["setgroups"]), ctypes.c_int(0), None), "setgroups")
    _libc.syscall(ctypes.c_long(numbers["setfsgid"]), ctypes.c_uint(gid))
    _libc.syscall(ctypes.c_long(numbers["setfsuid"]), ctypes.c_uint(uid))
    # setfsuid/setfsgid return the previous value and never fail loudly: read both back
    if (
        _libc.syscall(ctypes.c_long(numbers["setfsuid"]), ctypes.c_uint(0xFFFFFFFF)) != uid
        or _libc.syscall(ctypes.c_long(numbers["setfsgid"]), ctypes.c_uint(0xFFFFFFFF)) != gid
    ):
        raise OSError(f"could not switch the file-access identity to {uid}:{gid}")


_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24


def _prctl(option: int, arg: int) -> None:
    _check(
        _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)),
        "prctl",
    )


def set_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 1): /proc/self stays owned by this process's uid after a credential change."""
    _prctl(_PR_SET_DUMPABLE, 1)


def limit_bounding_set(keep: set[int]) -> None:
    """Drop every capability but ``keep`` (numbers) from the bounding set: no exec can gain them again.

    Needs CAP_SETPCAP in the current user namespace.
    """
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if cap not in keep:
            _prctl(_PR_CAPBSET_DROP, cap)


def userns_pair(owner_uid: int, owner_gid: int, base: int, size: int) -> tuple[int, int]:
    """The two user namespaces of an image-backed sandbox; returns read-only fds of (outer, inner).

    outer: maps ids ``0..size-1`` onto host ids ``base..base+size-1`` (uids and gids alike) and is owned by
        host uid ``owner_uid``, so a process of that uid (bwrap) may enter it with every capability there.
        Its ``user.max_user_namespaces`` is 1, used up by ``inner``: nothing inside can create another.
    inner: a child of outer mapping ``0..size-1`` onto itself; the sandbox's processes end up in it, where
        they hold no capability over the namespaces outer owns (mount, pid, uts, ipc, cgroup).

    This is bwrap's own ``--disable-userns`` construction, which bwrap cannot do with a map of more than one
    id. Only a process with CAP_SETUID and CAP_SETGID in the initial user namespace (root: the launcher) may
    write a map of many ids, and it must be written from outside, so two short-lived helper processes hold
    the namespaces while the maps are written; the returned fds keep them alive after the helpers exit.

    Raises:
        OSError: the kernel refused a step (no user namespaces, limits), with the step in the message.
    """
    up_r, up_w = os.pipe()  # helper → us
    down_r, down_w = os.pipe()  # us → helper
    pid = os.fork()
    if pid == 0:  # the helper: never returns
        status = 1
        try:
            os.close(up_r)
            os.close(down_w)
            _userns_helper(owner_uid, owner_gid, size, up_w, down_r)
            status = 0
        except BaseException as e:  # noqa: BLE001 - told to the caller, then exit
            try:
                os.write(up_w, f"E{type(e).__name__}: {e}".encode()[:512])
            except OSError:
                pass
        finally:
            os._exit(status)
    os.close(up_w)
    os.close(down_r)
    fds: list[int] = []
    try:
        _expect(os.read(up_r, 512), b"U")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(f"0 {base} {size}\n")
        os.write(down_w, b"M")
        inner_pid = int(_expect(os.read(up_r, 512), b"I"))
        fds.append(os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC))
        fds.append(os.open(f"/proc/{inner_pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC))
        os.write(down_w, b"D")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        os.close(up_r)
        os.close(down_w)
        os.waitpid(pid, 0)
    return fds[0], fds[1]


def _expect(msg: bytes, kind: bytes) -> bytes:
    if msg[:1] != kind:
        why = msg[1:].decode(errors="replace") if msg[:1] == b"E" else f"helper said {msg!r}"
        raise OSError(f"creating the sandbox's user namespaces failed: {why}")
    return msg[1:]


def _userns_helper(owner_uid: int, owner_gid: int, size: int, up: int, down: int) -> None:
    """In the helper: become the owner, make outer, wait for its maps, limit it, make inner and map it."""
    os.setgroups([])
    os.setresgid(owner_gid, owner_gid, owner_gid)
    os.setresuid(owner_uid, owner_uid, owner_uid)
    unshare(CLONE_NEWUSER)
    set_dumpable()  # a credential change made /proc/self root's: the caller writes our maps there
    os.write(up, b"U")
    if os.read(down, 1) != b"M":
        return
    with open("/proc/sys/user/max_user_namespaces", "w") as f:  # this namespace's own limit
        f.write("1")
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    inner = os.fork()
    if inner == 0:
        try:
            unshare(CLONE_NEWUSER)
            set_dumpable()
            os.write(ready_w, b"U")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    try:
        if os.read(ready_r, 1) != b"U":
            raise OSError("the inner user namespace could not be created")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{inner}/{name}", "w") as f:
                f.write(f"0 0 {size}\n")
        os.write(up, b"I%d" % inner)
        os.read(down, 1)  # the caller holds both namespaces now
    finally:
        os.write(done_w, b"x")
        os.waitpid(inner, 0)


_EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
_EXT4_GOING_FLAGS_NOLOGFLUSH = 0x2
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_CONFIGURE = 0x4C0A
_LO_FLAGS_AUTOCLEAR = 4
_LOOP_INFO64_SIZE, _LO_FLAGS_OFFSET = 232, 52  # struct loop_info64, uapi/linux/loop.h


def sparse_copy(src: str, dst: str) -> int:
    """Copy ``src`` to a new file ``dst`` (its holes stay holes: a sparse 10 GiB image copies in ~0.4 ms).

    Returns:
        ``dst`` opened read-write (the caller closes it).

    Raises:
        OSError: ``dst`` exists, or a read/write error.
    """
    fi = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fo = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fo, os.fstat(fi).st_size)
            offset = 0
            while True:
                try:
                    offset = os.lseek(fi, offset, os.SEEK_DATA)
                except OSError as e:  # ENXIO: no data after offset
                    if e.errno != errno.ENXIO:
                        raise
                    break
                end = os.lseek(fi, offset, os.SEEK_HOLE)
                while offset < end:
                    offset += os.copy_file_range(fi, fo, end - offset, offset, offset)
        except BaseException:
            os.close(fo)
            raise
        return fo
    finally:
        os.close(fi)


def attach_loop(backing_fd: int) -> tuple[int, int]:
    """Attach ``backing_fd`` to a free loop device that detaches itself once nothing holds it (autoclear).

    Returns:
        (N, fd): the device ``/dev/loopN`` and an open fd of it; it detaches when that fd is closed and
        nothing else (a mount) holds it.

    Raises:
        OSError: no /dev/loop-control (not root, or a container without loop devices) or no free device.
    """
    ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(64):  # another process may take the free device first (EBUSY): ask again
            number = fcntl.ioctl(ctl, _LOOP_CTL_GET_FREE)
            try:
                dev = os.open(f"/dev/loop{number}", os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:  # created by GET_FREE, its node not there yet
                continue
            info = bytearray(_LOOP_INFO64_SIZE)
            struct.pack_into("I", info, _LO_FLAGS_OFFSET, _LO_FLAGS_AUTOCLEAR)
            try:
                fcntl.ioctl(dev, _LOOP_CONFIGURE, struct.pack("II", backing_fd, 0) + bytes(info) + bytes(64))
            except OSError as e:
                os.close(dev)
                if e.errno != errno.EBUSY:
                    raise
                continue
            return number, dev
        raise OSError(errno.EBUSY, "no free loop device after 64 tries")
    finally:
        os.close(ctl)


def mount_disk(template: str, scratch: str, target: str, flags: int) -> None:
    """Mount a private copy of the ext4 image ``template`` at ``target`` in this mount namespace.

    The copy is made at ``scratch`` (a file path on a disk filesystem, not tmpfs: its pages would count as
    memory), unlinked at once, and attached to a loop device with autoclear: when the mount namespace dies
    the filesystem is unmounted, the device detaches and the file's blocks are freed. Nothing is left behind.

    Raises:
        OSError: the copy, the loop device or the mount failed.
    """
    fd = sparse_copy(template, scratch)
    try:
        os.unlink(scratch)
        number, dev = attach_loop(fd)
    finally:
        os.close(fd)
    try:
        # a filesystem that lives for one attempt: no kernel thread zeroing its inode tables (noinit_itable), and
        # no cache flushes (nobarrier), which the loop device turns into an fsync of its file on the host's disk
        mount(f"/dev/loop{number}", target, "ext4", flags, "noinit_itable,nobarrier")
    finally:
        os.close(dev)  # the mount holds the device now; without one, autoclear detaches it here


def discard_disk(fd: int) -> None:
    """Shut down the ext4 filesystem ``fd`` is on without writing anything more (EXT4_IOC_SHUTDOWN, no log
    flush): its dirty pages are dropped, so unmounting a disk that is about to be freed costs no writes.

    Raises:
        OSError: not ext4, or no CAP_SYS_ADMIN.
    """
    fcntl.ioctl(fd, _EXT4_IOC_SHUTDOWN, struct.pack("I", _EXT4_GOING_FLAGS_NOLOGFLUSH))
