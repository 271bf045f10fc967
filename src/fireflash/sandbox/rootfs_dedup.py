"""Deduplicated extraction of an image's tar stream against an earlier export, and disk use counted once per inode.

    added_bytes, linked = extract_deduplicated(export.stdout, tmp, reference_export, uid_base)

Images built on one base (the SWE tasks of issue 30: one image per task, all but the last layer shared)
export the same files again and again. The image's tar stream is copied to ``tar -x`` byte for byte,
except for regular files identical to the file at the same path of a reference export: those are left
out of the stream and, once ``tar`` is done and ownership is shifted, made hard links to the reference's
file. Identical means equal bytes (compared, never assumed from size and mtime) and equal inode metadata
after the shift: mode, owner, group and mtime (to the nanosecond), and no extended attributes or other PAX
records on either side. A hard link shares its inode, so a file whose metadata differed would change under
one of the two trees; mtime must match because it is read (Python's ``.pyc`` files are checked against
their source's mtime, ``make`` compares them). What a deduplicated tree does not keep is each file's link
count (2 or more instead of 1), inode number and ctime, which no two exports share anyway. Directory
mtimes, which linking changes, are set back. The left-out files are never written, so an export on a
cached base costs the bytes that differ, and less time than a full one (rootfs.py has the numbers).

Links are made with ``openat2(RESOLVE_NO_SYMLINKS)`` on both sides: a symlink in either tree (an image's
``/lib -> /usr/lib``, or one an image plants over a directory after its files) is never followed out of it.
Both trees are read-only lowers of overlays (bwrap.py) and nothing writes into them after export, so a
shared inode is never written through: a sandbox's write copies the file up into its own layer.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import BinaryIO

from fireflash.sandbox import linux

BLOCK = 512
MAX_COMPARED_BYTES = 256 << 20  # a larger file is written, not held in memory to be compared
MAX_LINKS = 60_000  # ext4 allows 65,000 links to an inode; a file shared that widely is written again
_PLAIN_PAX = {"path", "size", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname"}
_DATA_TYPES = {tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE}
TAR_EXTRACT = ["tar", "-x", "-p", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--exclude=dev/*"]
"""How every export is unpacked (device nodes are skipped: mknod needs privileges, sandboxes mount their own /dev)."""


def _read(src: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = src.read(left)
        if not chunk:
            raise tarfile.ReadError(f"the image's tar stream ended {left} bytes early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _pax_records(data: bytes) -> dict[str, str]:
    records, pos = {}, 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.index(b" ", pos)
        length = int(data[pos:space])
        key, _, value = data[space + 1:pos + length - 1].partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _relative(name: str) -> str | None:
    """``name`` as a path under the extraction root, or None for one that could leave it (tar decides)."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts) if parts and ".." not in parts else None


class _Reference:
    """The files of a reference export, looked up without following any symlink."""

    def __init__(self, root: Path, uid_base: int) -> None:
        self.root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.uid_base = uid_base
        self.used: set[int] = set()  # inodes already linked into the new tree: its own links stay its own

    def same(self, rel: str, info: tarfile.TarInfo, pax: dict[str, str], data: bytes) -> int | None:
        """The inode of ``rel`` in the reference if member ``info`` (``data`` its bytes) would extract identical."""
        if not set(pax) <= _PLAIN_PAX:  # xattrs, ACLs, sparse maps: not compared, so not linked
            return None
        try:
            mtime_ns = int(Decimal(pax["mtime"]) * 10**9) if "mtime" in pax else info.mtime * 10**9
            uid, gid = int(pax.get("uid", info.uid)), int(pax.get("gid", info.gid))
            fd = linux.open_in_root(self.root_fd, rel, os.O_RDONLY | os.O_NOFOLLOW, no_symlinks=True)
        except (OSError, ValueError, InvalidOperation):
            return None
        try:
            st = os.fstat(fd)
            if not (
                stat.S_ISREG(st.st_mode) and st.st_ino not in self.used and st.st_size == len(data)
                and st.st_nlink < MAX_LINKS
                and stat.S_IMODE(st.st_mode) == info.mode & 0o7777 and st.st_mtime_ns == mtime_ns
                and (st.st_uid, st.st_gid) == (self.uid_base + uid, self.uid_base + gid) and not os.listxattr(fd)
            ):
                return None
            with open(fd, "rb", buffering=0, closefd=False) as f:
                if f.read(len(data) + 1) != data:
                    return None
            self.used.add(st.st_ino)
            return st.st_ino
        finally:
            os.close(fd)

    def close(self) -> None:
        os.close(self.root_fd)


def filter_tar(src: BinaryIO, dst: BinaryIO, ref: _Reference | None) -> dict[str, tuple[str, str | int]]:
    """Copy tar stream ``src`` to ``dst`` byte for byte, less the regular files identical in ``ref``.

    Returns:
        What was left out, in stream order: path → ``("ref", inode)`` (link the reference's file) or
        ``("new", path)`` (an image's own hard link to a left-out file).
    """
    left_out: dict[str, tuple[str, str | int]] = {}
    pending, pax, long_name, long_link = bytearray(), {}, None, None
    while True:
        block = src.read(BLOCK)
        if len(block) < BLOCK:
            raise tarfile.ReadError("the image's tar stream ended inside a header")
        if block == bytes(BLOCK):  # the end: the rest is padding
            dst.write(pending + block)
            shutil.copyfileobj(src, dst)
            return left_out
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        if info.type in (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
            data = _read(src, _padded(info.size))
            pending += block + data
            if info.type == tarfile.XHDTYPE:
                pax.update(_pax_records(data[:info.size]))
            elif info.type == tarfile.GNUTYPE_LONGNAME:
                long_name = data[:info.size].rstrip(b"\0").decode("utf-8", "surrogateescape")
            else:
                long_link = data[:info.size].rstrip(b"\0").decode("utf-8", "surrogateescape")
            continue
        size = int(pax.get("size", info.size))
        has_data = info.type in _DATA_TYPES or info.type not in tarfile.SUPPORTED_TYPES
        data = _read(src, _padded(size if info.type != tarfile.GNUTYPE_SPARSE else info.size)) if has_data else b""
        rel = _relative(pax.get("path") or long_name or info.name)
        linkname = _relative(pax.get("linkpath") or long_link or info.linkname)
        if info.type == tarfile.XGLTYPE:  # global records change the members after it: compare nothing more
            ref = None
        dropped: tuple[str, str | int] | None = None
        if ref is None:
            pass
        elif rel is not None and info.type in (tarfile.REGTYPE, tarfile.AREGTYPE) and size <= MAX_COMPARED_BYTES:
            inode = ref.same(rel, info, pax, data[:size])
            dropped = ("ref", inode) if inode is not None else None
        elif rel is not None and info.type == tarfile.LNKTYPE and linkname in left_out:
            dropped = ("new", linkname)
        if rel is not None:
            left_out.pop(rel, None)  # a later member of the same name replaces an earlier one
        if dropped is not None:
            left_out[rel] = dropped
        else:
            dst.write(pending + block + data)
        pending, pax, long_name, long_link = bytearray(), {}, None, None


def link_left_out(new: Path, ref: Path, left_out: dict[str, tuple[str, str | int]]) -> None:
    """Make each left-out path of ``new`` a hard link to its source, then set back its directory's times.

    Raises:
        OSError: a path's directory is missing in ``new`` or reached through a symlink, or the reference's
            file changed (a named error: the export is then discarded, never left incomplete).
    """
    new_fd = os.open(new, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    ref_fd = os.open(ref, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    parents: dict[str, tuple[int, os.stat_result]] = {}
    try:
        for rel, (kind, source) in left_out.items():
            parent, name = os.path.split(rel)
            if parent not in parents:
                fd = linux.open_in_root(new_fd, parent or ".", os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True)
                parents[parent] = (fd, os.fstat(fd))
            root_fd = ref_fd if kind == "ref" else new_fd
            src = linux.open_in_root(root_fd, rel if kind == "ref" else str(source), os.O_PATH | os.O_NOFOLLOW,
                                     no_symlinks=True)
            try:
                if kind == "ref" and os.fstat(src).st_ino != source:
                    raise OSError(f"{ref / rel} changed while {new} was linked to it")
                os.link(f"/proc/self/fd/{src}", name, dst_dir_fd=parents[parent][0], follow_symlinks=True)
            finally:
                os.close(src)
    finally:
        for fd, st in parents.values():
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.close(fd)
        os.close(new_fd)
        os.close(ref_fd)


def extract_deduplicated(
    src: BinaryIO, dest: Path, ref: Path | None, uid_base: int, finish: Callable[[Path, int], None],
    timeout_sec: float,
) -> tuple[int, int, str]:
    """Unpack the image tar stream ``src`` into ``dest``, call ``finish(dest, uid_base)`` (rootfs.py shifts
    ownership there), then link the files identical in export ``ref`` (None: a plain extraction).

    Returns:
        ``(added_bytes, linked, tar_errors)``: disk bytes ``dest`` holds that ``ref`` does not (each inode
        once), files linked, and tar's stderr when it failed (empty on success).
    """
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: tar's complaints cannot fill it and stall
        untar = subprocess.Popen([*TAR_EXTRACT, "-C", str(dest)], stdin=subprocess.PIPE, stderr=err)
        reference = _Reference(ref, uid_base) if ref is not None else None
        left_out: dict[str, tuple[str, str | int]] = {}
        try:
            # parsed even without a reference: a stream cut short raises here, where tar would exit 0
            left_out = filter_tar(src, untar.stdin, reference)
            untar.stdin.close()
        except BrokenPipeError:  # tar stopped early: its error says why
            pass
        finally:
            if reference is not None:
                reference.close()
            try:
                untar.stdin.close()  # idempotent; after a malformed stream, tar must not wait for more
            except BrokenPipeError:
                pass
            try:
                untar.wait(timeout=timeout_sec)
            finally:
                if untar.poll() is None:
                    untar.kill()
                    untar.wait()
        err.seek(0)
        errors = err.read().decode(errors="replace")
    if untar.returncode != 0:
        return 0, 0, errors or f"tar exited {untar.returncode}"
    finish(dest, uid_base)
    if ref is not None and left_out:
        link_left_out(dest, ref, left_out)
    shared = reference.used if reference is not None else set()
    return _own_bytes(dest, shared), len(left_out), ""


def _own_bytes(root: Path, shared: set[int]) -> int:
    seen = set(shared)
    total = os.lstat(root).st_blocks * 512
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(parent, name))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total


def disk_bytes(roots: list[Path]) -> int:
    """Disk bytes of the trees ``roots`` (512-byte blocks), each inode counted once, as ``du`` does."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in roots:
        for parent, dirs, files in os.walk(root):
            for name in dirs + files:
                st = os.lstat(os.path.join(parent, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
        if os.path.lexists(root):
            total += os.lstat(root).st_blocks * 512
    return total


def freed_bytes(root: Path) -> int:
    """Disk bytes that removing the tree ``root`` frees: its inodes with no link outside it (512-byte blocks)."""
    links: dict[int, list] = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(parent, name))
            entry = links.setdefault(st.st_ino, [0, st])
            entry[0] += 1
    freed = os.lstat(root).st_blocks * 512
    for count, st in links.values():
        if stat.S_ISDIR(st.st_mode) or count >= st.st_nlink:
            freed += st.st_blocks * 512
    return freed
