"""Hard-link deduplication of an exported rootfs against an earlier one, and disk use counted once per inode.

    new_bytes, linked = dedup_tree(new_export, reference_export)

Images built on one base (the SWE tasks of issue 30: one image per task, all but the last layer shared)
export the same files again and again. ``dedup_tree`` replaces each regular file of the new export that
is identical to the file at the same path of a reference export by a hard link to it, so the new directory
costs only what differs. Identical means equal bytes (compared, never assumed from size and mtime) and
equal inode metadata: mode, owner, group, mtime and extended attributes. A hard link shares its inode, so
a file whose metadata differed would change under one of the two trees; mtime is required to match because
it is read (Python's ``.pyc`` files are checked against their source's mtime, ``make`` compares them). What
a deduplicated tree does not keep is each file's link count (2 or more instead of 1), inode number and
ctime, which no plain export keeps either. Directory mtimes, which linking changes, are set back.

Both trees are read-only lowers of overlays (bwrap.py) and nothing writes into them after export, so a
shared inode is never written through: a sandbox's write copies the file up into its own layer.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

CHUNK_BYTES = 1 << 20


def _xattrs(path: str) -> dict[str, bytes]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:  # a filesystem without xattrs
        return {}
    return {name: os.getxattr(path, name, follow_symlinks=False) for name in sorted(names)}


def same_bytes(a: str, b: str) -> bool:
    """Whether files ``a`` and ``b`` hold the same bytes (read in 1 MiB chunks, stopping at the first difference)."""
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        while True:
            ca, cb = fa.read(CHUNK_BYTES), fb.read(CHUNK_BYTES)
            if ca != cb:
                return False
            if not ca:
                return True


def _linkable(new: os.stat_result, ref: os.stat_result) -> bool:
    return (
        stat.S_ISREG(ref.st_mode) and new.st_mode == ref.st_mode and new.st_size == ref.st_size
        and new.st_uid == ref.st_uid and new.st_gid == ref.st_gid and new.st_mtime_ns == ref.st_mtime_ns
    )


def dedup_tree(new: Path, ref: Path) -> tuple[int, int]:
    """Replace files of ``new`` identical to the same path under ``ref`` by hard links to ``ref``'s files.

    Only files with one link in ``new`` are replaced, each by a different inode of ``ref``, so ``new``'s own
    hard links stay as they were. ``ref`` must not change meanwhile (the caller holds its lock) and must be
    on ``new``'s filesystem.

    Returns:
        ``(bytes, linked)``: disk bytes ``new`` holds that ``ref`` does not (512-byte blocks, each inode
        counted once) and the number of files linked.
    """
    used: set[int] = set()  # inodes of ref already linked into new
    # directories of new whose counterpart in ref is a real directory: a symlink in ref (/lib -> usr/lib,
    # or an absolute one) is never followed, so nothing outside ref is ever compared or linked
    ref_dirs = {"."}
    seen: set[int] = set()  # inodes of new already counted
    own_bytes, linked = 0, 0
    for parent, dirs, files in os.walk(new):
        rel = os.path.relpath(parent, new)
        ref_parent = os.path.join(ref, rel)
        in_ref = rel in ref_dirs
        dir_stat = os.lstat(parent)
        changed = False
        for name in dirs + files:
            path = os.path.join(parent, name)
            st = os.lstat(path)
            if in_ref and stat.S_ISDIR(st.st_mode):
                try:
                    if stat.S_ISDIR(os.lstat(os.path.join(ref_parent, name)).st_mode):
                        ref_dirs.add(os.path.normpath(os.path.join(rel, name)))
                except OSError:
                    pass
            if in_ref and stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                ref_path = os.path.join(ref_parent, name)
                try:
                    rst = os.lstat(ref_path)
                except OSError:
                    rst = None
                if (
                    rst is not None and rst.st_ino not in used and _linkable(st, rst)
                    and _xattrs(path) == _xattrs(ref_path) and same_bytes(path, ref_path)
                ):
                    tmp = os.path.join(parent, f".{name}.ff-dedup")
                    try:
                        os.link(ref_path, tmp)
                    except FileExistsError:  # the image has a file of that name: leave this one alone
                        pass
                    else:
                        os.rename(tmp, path)  # atomic: the path always names one of the two equal files
                        used.add(rst.st_ino)
                        linked += 1
                        changed = True
                        continue
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                own_bytes += st.st_blocks * 512
        if changed:  # linking wrote the directory; its mtime is part of the image
            os.utime(parent, ns=(dir_stat.st_atime_ns, dir_stat.st_mtime_ns), follow_symlinks=False)
    own_bytes += os.lstat(new).st_blocks * 512
    return own_bytes, linked


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
