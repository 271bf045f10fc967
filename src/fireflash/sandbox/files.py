"""Binary-safe file access inside a sandbox's root, from the host, without following links out of it.

Every path is resolved with ``openat2(RESOLVE_IN_ROOT)`` against a directory fd that acts as ``/``
(``/proc/PID/root`` of a bwrap sandbox, or the sandbox directory of the unsafe-local backend), so a
sandbox that plants ``/app/x -> /etc/shadow`` gets its *own* ``/etc/shadow`` (unreadable to it), never the
host's. Read-only mounts of the sandbox stay read-only (EROFS).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from fireflash.sandbox.linux import open_in_root


def _normalise(path: str, cwd: str) -> str:
    if "\0" in path:
        raise ValueError(f"path {path!r} contains a NUL byte")
    return posixpath.normpath(posixpath.join(cwd, path))


def read_bytes(root_fd: int, path: str, cwd: str = "/", max_bytes: int | None = None) -> bytes:
    """Read a file inside the root.

    Args:
        path: absolute, or relative to ``cwd`` (both inside the sandbox).
        max_bytes: read at most this many bytes (None: all).

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: as for ``open``; the message names the path.
    """
    fd = open_in_root(root_fd, _normalise(path, cwd), os.O_RDONLY)
    try:
        if not _is_regular(fd):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
        chunks, left = [], max_bytes if max_bytes is not None else -1
        while left != 0:
            chunk = os.read(fd, 1 << 20 if left < 0 else min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left = left - len(chunk) if left > 0 else left
        return b"".join(chunks)
    finally:
        os.close(fd)


def head_tail(root_fd: int, path: str, n_bytes: int) -> tuple[int, bytes, bytes]:
    """(size in bytes, first bytes, last bytes) of a command's output file; tail is empty when the head holds it all.

    Called with the host's identity, so it refuses any symlink on the path (the output dir is a
    mount point the sandbox cannot replace, and links cannot cross into it): it only ever reads the
    sandbox's own regular files. A missing, non-regular or linked file reads as empty.
    """
    try:
        fd = open_in_root(root_fd, path, os.O_RDONLY | os.O_NONBLOCK, no_symlinks=True)
    except OSError:
        return 0, b"", b""
    try:
        if not _is_regular(fd):
            return 0, b"", b""
        size = os.fstat(fd).st_size
        if size <= 2 * n_bytes:
            return size, os.pread(fd, 2 * n_bytes, 0), b""
        return size, os.pread(fd, n_bytes, 0), os.pread(fd, n_bytes, size - n_bytes)
    finally:
        os.close(fd)


def file_size(root_fd: int, path: str) -> int:
    """Size of an output file in bytes; 0 when it does not exist or is a link (see ``head_tail``)."""
    try:
        fd = open_in_root(root_fd, path, os.O_PATH, no_symlinks=True)
    except OSError:
        return 0
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def remove_output(root_fd: int, path: str) -> None:
    """Delete a command's output file (no symlink followed, see ``head_tail``); a missing one is fine."""
    directory, name = posixpath.split(path)
    try:
        dfd = open_in_root(root_fd, directory, os.O_PATH | os.O_DIRECTORY, no_symlinks=True)
    except OSError:
        return
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def write_bytes(
    root_fd: int, path: str, data: bytes, mode: int, owner: tuple[int, int] | None, cwd: str = "/"
) -> None:
    """Create or replace a file inside the root, creating missing parent directories.

    Args:
        mode: permission bits of the file (e.g. 0o644); new directories get 0o755.
        owner: (host uid, host gid) given to new files and directories; None keeps the caller's.

    Raises:
        PermissionError, IsADirectoryError, OSError(EROFS / ENOSPC): as for ``open``/``write``.
    """
    path = _normalise(path, cwd)
    _make_parents(root_fd, posixpath.dirname(path), owner)
    fd = open_in_root(root_fd, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        if not _is_regular(fd):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _make_parents(root_fd: int, directory: str, owner: tuple[int, int] | None) -> None:
    try:
        os.close(open_in_root(root_fd, directory, os.O_PATH | os.O_DIRECTORY))
        return
    except FileNotFoundError:
        pass
    parent, name = posixpath.split(directory)
    _make_parents(root_fd, parent, owner)
    pfd = open_in_root(root_fd, parent, os.O_PATH | os.O_DIRECTORY)
    try:
        try:
            os.mkdir(name, 0o755, dir_fd=pfd)
        except FileExistsError:
            return
        if owner is not None:
            os.chown(name, *owner, dir_fd=pfd, follow_symlinks=False)
    finally:
        os.close(pfd)


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)
