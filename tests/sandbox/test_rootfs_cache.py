"""Deduplicated rootfs exports and the cache's cap (issue 30), from tar streams of plain directories: no podman.

Run as root (as CI does): the trees carry the shifted owners of real exports.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from fireflash.sandbox.rootfs import shift_ownership
from fireflash.sandbox.rootfs_cache import (
    evict,
    hold_export,
    lock_path,
    pick_reference,
    record_and_evict,
    write_sidecar,
)
from fireflash.sandbox.rootfs_dedup import disk_bytes, extract_deduplicated, freed_bytes

BASE = 1_000_000_000
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chowns files to the shifted ids of an export")
MTIME_NS = 1_700_000_000_123_456_789


def _file(path: Path, data: bytes, mode: int = 0o644, uid: int = 0, mtime_ns: int = MTIME_NS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)
    os.chown(path, uid, uid)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def _image(root: Path, extra: dict[str, bytes] | None = None) -> Path:
    """An image's files, owned as in the image: what every image on the base holds, plus ``extra``."""
    _file(root / "usr/lib/libc.so", b"\x7fELF" + b"c" * 40_000, 0o755)
    _file(root / "usr/bin/python3", b"\x7fELF" + b"p" * 20_000, 0o755)
    os.link(root / "usr/bin/python3", root / "usr/bin/python3.11")  # the image's own hard link
    _file(root / "usr/bin/su", b"setuid", 0o4755)
    _file(root / "etc/os-release", b"ID=debian\n")
    _file(root / "home/agent/.bashrc", b"PS1=x\n", uid=1000)
    (root / "lib").symlink_to("usr/lib")
    for rel, data in (extra or {}).items():
        _file(root / rel, data)
    for parent, dirs, _ in os.walk(root):
        for d in dirs:
            os.utime(os.path.join(parent, d), ns=(MTIME_NS, MTIME_NS), follow_symlinks=False)
    return root


def _tar(root: Path) -> io.BytesIO:
    out = subprocess.run(["tar", "-c", "--format=posix", "--numeric-owner", "--xattrs", "-C", str(root), "."],
                         capture_output=True, check=True).stdout
    return io.BytesIO(out)


def _finish(tree: Path, uid_base: int) -> None:
    os.chmod(tree, 0o755)
    shift_ownership(tree, uid_base)


def _export(dest: Path, image: Path, ref: Path | None = None) -> tuple[int, int]:
    """``image`` exported into ``dest`` (deduplicated against export ``ref``): (added bytes, files linked)."""
    dest.mkdir(parents=True)
    added, linked, errors = extract_deduplicated(_tar(image), dest, ref, BASE, _finish, 60)
    assert errors == ""
    return added, linked


def _meta(root: Path) -> dict[str, tuple]:
    """lstat of every entry, less what no two exports share (inode, link count, ctime, atime), plus xattrs."""
    out = {}
    for parent, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(parent, name)
            st = os.lstat(path)
            xattrs = sorted(os.listxattr(path, follow_symlinks=False)) if not stat.S_ISLNK(st.st_mode) else []
            target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns,
                                                 xattrs, target)
    return out


def _ino(path: Path) -> int:
    return os.lstat(path).st_ino


def test_identical_files_are_linked_and_differing_ones_kept_apart(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _export(a, _image(tmp_path / "ia", {"app/same.py": b"x = 1\n", "app/mod.py": b"return a < b\n"}))
    added, linked = _export(b, _image(tmp_path / "ib", {"app/same.py": b"x = 1\n", "app/mod.py": b"return a > b\n"}), a)
    for shared in ("usr/lib/libc.so", "app/same.py", "usr/bin/su", "home/agent/.bashrc", "etc/os-release"):
        assert _ino(b / shared) == _ino(a / shared), shared
    assert _ino(b / "app/mod.py") != _ino(a / "app/mod.py")  # same size, mode, owner, mtime; other bytes
    assert (b / "app/mod.py").read_bytes() == b"return a > b\n"
    # the image's own hard link is linked whole: both names one inode, that of a's
    assert _ino(b / "usr/bin/python3") == _ino(b / "usr/bin/python3.11") == _ino(a / "usr/bin/python3")
    assert linked == 7
    assert added == disk_bytes([a, b]) - disk_bytes([a])  # what b costs on top of a, each inode once


@pytest.mark.parametrize("change", ["mode", "owner", "mtime", "xattr"])
def test_a_file_differing_only_in_metadata_is_not_linked(tmp_path, change):
    a, b = tmp_path / "a", tmp_path / "b"
    _export(a, _image(tmp_path / "ia", {"app/f": b"same"}))
    image = _image(tmp_path / "ib", {"app/f": b"same"})
    f = image / "app/f"
    if change == "mode":
        os.chmod(f, 0o600)
    elif change == "owner":
        os.chown(f, 1000, 1000)
    elif change == "mtime":
        os.utime(f, ns=(MTIME_NS + 1, MTIME_NS + 1))  # one nanosecond: .pyc checks read it
    else:
        os.setxattr(f, "user.fireflash", b"1")
    _export(b, image, a)
    assert _ino(b / "app/f") != _ino(a / "app/f")
    assert _ino(b / "usr/lib/libc.so") == _ino(a / "usr/lib/libc.so")


def test_dedup_keeps_every_entrys_metadata(tmp_path):
    a, b, plain = tmp_path / "a", tmp_path / "b", tmp_path / "plain"
    _export(a, _image(tmp_path / "ia", {"app/same.py": b"x = 1\n"}))
    image = _image(tmp_path / "ib", {"app/same.py": b"x = 1\n", "app/new.py": b"y = 2\n"})
    _export(plain, image)
    assert _export(b, image, a)[1] > 0
    assert _meta(b) == _meta(plain)  # directory mtimes included (linking writes the directories)


def test_a_symlink_in_the_reference_is_never_followed(tmp_path):
    """A reference whose /usr/lib is a symlink out of it (absolute, as images may have) links nothing there."""
    outside = _file(tmp_path / "host/lib/libc.so", b"\x7fELF" + b"c" * 40_000, 0o755, uid=BASE)
    a = tmp_path / "a"
    (a / "usr").mkdir(parents=True)
    (a / "usr/lib").symlink_to(outside.parent)
    _export(tmp_path / "b", _image(tmp_path / "ib"), a)
    assert os.lstat(tmp_path / "b/usr/lib/libc.so").st_nlink == 1 and os.lstat(outside).st_nlink == 1


def test_an_image_cannot_redirect_a_link_through_its_own_symlink(tmp_path):
    """An image whose tar puts a file in a directory, then replaces the directory by a symlink out."""
    a = tmp_path / "a"
    _export(a, _image(tmp_path / "ia", {"x/f": b"same"}))
    image = _image(tmp_path / "ib", {"x/f": b"same"})
    stream = _tar(image)
    with tarfile.open(fileobj=stream) as t:
        last = t.getmembers()[-1]
        end = last.offset_data + -(-last.size // 512) * 512
    (tmp_path / "host").mkdir()
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "x").symlink_to(tmp_path / "host")
    tail = subprocess.run(["tar", "-c", "--format=posix", "-C", str(evil), "x"], capture_output=True,
                          check=True).stdout
    (tmp_path / "b").mkdir()
    try:
        _, _, errors = extract_deduplicated(io.BytesIO(stream.getvalue()[:end] + tail), tmp_path / "b", a, BASE,
                                            _finish, 60)
    except OSError as e:  # the link step refuses the symlinked directory
        errors = str(e)
    assert errors
    assert list((tmp_path / "host").iterdir()) == []


def test_removing_one_export_leaves_the_other_intact(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _export(a, _image(tmp_path / "ia", {"app/same.py": b"x = 1\n"}))
    _export(b, _image(tmp_path / "ib", {"app/same.py": b"x = 1\n"}), a)
    before = _meta(b)
    assert freed_bytes(a) == disk_bytes([a]) - sum(  # only what b does not share
        os.lstat(a / p).st_blocks * 512 for p in ("usr/lib/libc.so", "usr/bin/python3", "usr/bin/su",
                                                  "etc/os-release", "home/agent/.bashrc", "app/same.py"))
    shutil.rmtree(a)
    assert _meta(b) == before
    assert (b / "usr/lib/libc.so").read_bytes()[:4] == b"\x7fELF" and (b / "app/same.py").read_text() == "x = 1\n"


def _cached(cache: Path, name: str, layers: list[str], used: float, extra: dict[str, bytes] | None = None) -> Path:
    export = cache / f"{name * 32}-u{BASE}"
    _export(export, _image(cache / f"image-{name}", extra))
    write_sidecar(export, name * 64, layers, BASE)
    hold_export(export).release()
    os.utime(lock_path(export), (used, used))
    return export


def test_the_reference_is_the_export_sharing_the_most_leading_layers(tmp_path):
    _cached(tmp_path, "a", ["base", "deps"], used=300)
    b = _cached(tmp_path, "b", ["base", "deps", "app1"], used=100)
    _cached(tmp_path, "c", ["base", "deps", "app2"], used=200)
    _cached(tmp_path, "d", ["other", "deps", "app3", "x"], used=400)
    _cached(tmp_path / "elsewhere", "e", ["base", "deps", "app1"], used=500)
    new = tmp_path / f"{'f' * 32}-u{BASE}"
    hold = pick_reference(tmp_path, ["base", "deps", "app1", "tests"], BASE, exclude=new)
    assert hold.path == b
    hold.release()
    # a, b and c share two layers: the most recently used wins
    hold = pick_reference(tmp_path, ["base", "deps", "app9"], BASE, exclude=new)
    assert hold.path.name.startswith("a")
    hold.release()
    assert pick_reference(tmp_path, ["unrelated"], BASE, exclude=new) is None
    assert pick_reference(tmp_path, ["base", "deps", "app1"], BASE + 65536, exclude=new) is None  # other owners


def test_eviction_removes_least_recently_used_unheld_exports_until_under_the_cap(tmp_path):
    big = {"data/blob": os.urandom(400_000)}
    old = _cached(tmp_path, "a", ["l1"], used=100, extra=big)
    held = _cached(tmp_path, "b", ["l2"], used=200, extra={"data/blob": os.urandom(400_000)})
    mid = _cached(tmp_path, "c", ["l3"], used=300, extra={"data/blob": os.urandom(400_000)})
    new = _cached(tmp_path, "d", ["l4"], used=400, extra={"data/blob": os.urandom(400_000)})
    hold = hold_export(held)  # a live backend's hold: its use time is touched too
    os.utime(lock_path(held), (200, 200))
    each = disk_bytes([new])
    assert record_and_evict(tmp_path, 0, 0) == []  # 0: no cap; usage measured once (no usage.json yet)
    assert json.loads((tmp_path / "usage.json").read_text())["bytes"] == disk_bytes([old, held, mid, new])
    evicted = record_and_evict(tmp_path, 0, 2 * each + each // 2)
    assert evicted == [old, mid]  # b is older than c but held
    assert held.is_dir() and new.is_dir() and not old.exists() and not mid.exists()
    assert not lock_path(old).exists() and not (tmp_path / f"{old.name}.json").exists()
    assert json.loads((tmp_path / "usage.json").read_text())["bytes"] == disk_bytes([held, new])
    hold.release()
    assert evict(held) is not None and not held.exists()


def test_an_export_shared_by_links_counts_once_and_frees_only_its_own_bytes(tmp_path):
    a = _cached(tmp_path, "a", ["base"], used=100, extra={"app/x": b"1"})
    record_and_evict(tmp_path, 0, 0)
    b = tmp_path / f"{'b' * 32}-u{BASE}"
    hold = hold_export(b)
    added, _ = _export(tmp_path / "b.tmp", _image(tmp_path / "image-b", {"app/x": b"2"}), a)
    (tmp_path / "b.tmp").rename(b)
    record_and_evict(tmp_path, added, 0)
    usage = json.loads((tmp_path / "usage.json").read_text())["bytes"]
    assert usage == disk_bytes([a, b]) < disk_bytes([a]) + disk_bytes([b])
    record_and_evict(tmp_path, 0, 1)  # everything unheld goes
    assert not a.exists() and b.is_dir()
    assert json.loads((tmp_path / "usage.json").read_text())["bytes"] == disk_bytes([b])
    hold.release()


def test_an_eviction_waits_for_no_one_and_a_hold_after_it_sees_the_export_gone(tmp_path):
    a = _cached(tmp_path, "a", ["base"], used=100)
    fd = os.open(lock_path(a), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_SH)  # another process's hold
    assert evict(a) is None and a.is_dir()
    os.close(fd)
    assert evict(a) is not None
    hold = hold_export(a)  # a new lock file: held, but the caller finds no export and makes it again
    assert not a.exists() and hold is not None
    hold.release()


def test_a_truncated_stream_fails_at_once_with_or_without_a_reference(tmp_path):
    a = tmp_path / "a"
    _export(a, _image(tmp_path / "ia"))
    stream = _tar(_image(tmp_path / "ib")).getvalue()
    for n, ref in enumerate((a, None)):  # GNU tar itself exits 0 on a stream cut inside a file's data
        (tmp_path / f"b{n}").mkdir()
        with pytest.raises(tarfile.ReadError):  # rootfs.py reports it as the export failing
            extract_deduplicated(io.BytesIO(stream[:3000]), tmp_path / f"b{n}", ref, BASE, _finish, 5)
