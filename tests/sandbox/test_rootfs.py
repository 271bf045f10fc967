"""The parts of image-backed sandboxes that need no image: shifted ownership, users, mount points, user namespaces.

Run as root (as CI does): they chown files and create user namespaces.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fireflash.sandbox import SandboxConfig, linux
from fireflash.sandbox.errors import SandboxError
from fireflash.sandbox.identity import ROOT_CAPS, image_identity
from fireflash.sandbox.layers import LOOPBACK_HOSTS, build_image_skeleton, build_task_layer
from fireflash.sandbox.rootfs import IMAGE_IDS, host_ids_in_range, shift_ownership

BASE = 1_000_000_000
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chowns files and writes user namespace maps (root)")


def _tree(root: Path) -> Path:
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "usr" / "bin" / "su").write_text("x")
    os.chmod(root / "usr" / "bin" / "su", 0o4755)
    (root / "usr" / "bin" / "perl").write_text("p")
    os.link(root / "usr" / "bin" / "perl", root / "usr" / "bin" / "perl5.40")  # one inode, two names
    (root / "var").mkdir()
    os.chown(root / "var", 42, 42)  # _apt
    (root / "lnk").symlink_to("/etc/shadow")
    return root


def test_shift_gives_every_file_to_base_plus_its_id_and_keeps_setuid(tmp_path):
    root = _tree(tmp_path / "rootfs")
    assert shift_ownership(root, BASE) >= 7
    for path in (root, root / "usr" / "bin" / "su", root / "lnk"):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (BASE, BASE), path
    assert (os.stat(root / "var").st_uid, os.stat(root / "var").st_gid) == (BASE + 42, BASE + 42)
    assert os.stat(root / "usr" / "bin" / "perl").st_uid == BASE  # shifted once, not twice through the link
    assert stat.S_IMODE(os.stat(root / "usr" / "bin" / "su").st_mode) == 0o4755  # chown clears it; restored
    assert os.readlink(root / "lnk") == "/etc/shadow" and os.stat("/etc/shadow").st_uid == 0  # host untouched


def test_an_id_outside_the_mapped_range_is_refused_by_name(tmp_path):
    root = _tree(tmp_path / "rootfs")
    os.chown(root / "etc", IMAGE_IDS, 0)
    with pytest.raises(SandboxError, match=r"rootfs/etc is owned by 65536:0, outside the 65536 ids"):
        shift_ownership(root, BASE)


def _passwd(root: Path, passwd: str, group: str = "") -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text(passwd)
    (root / "etc" / "group").write_text(group)
    return root


def test_image_users_by_name_number_and_group(tmp_path):
    root = _passwd(tmp_path, "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/bin/sh\n",
                   "root:x:0:\nstaff:x:50:\nagent:x:1000:\n")
    me = image_identity(root, None, BASE)
    assert (me.uid, me.gid, me.name, me.home, me.host_uid, me.host_gid) == (0, 0, "root", "/root", BASE, BASE)
    assert me.caps == ROOT_CAPS and "CAP_SYS_ADMIN" not in me.caps
    agent = image_identity(root, "agent", BASE)
    assert (agent.uid, agent.gid, agent.home, agent.host_uid, agent.caps) == (1000, 1000, "/home/agent", BASE + 1000, {})
    assert image_identity(root, "agent:staff", BASE).gid == 50
    stranger = image_identity(root, "4242", BASE)  # docker: a uid without an entry has gid 0 and home /
    assert (stranger.uid, stranger.gid, stranger.name, stranger.home) == (4242, 0, "4242", "/")
    with pytest.raises(SandboxError, match="user 'ghost' is not in the image's /etc/passwd"):
        image_identity(root, "ghost", BASE)
    with pytest.raises(SandboxError, match="group 'wheel'"):
        image_identity(root, "agent:wheel", BASE)
    with pytest.raises(SandboxError, match="maps only ids 0..65535"):
        image_identity(root, "70000", BASE)


def test_the_images_passwd_is_read_inside_its_rootfs_never_through_a_link_to_the_host(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").symlink_to("/etc/passwd")  # absolute: inside the rootfs, not the host's
    with pytest.raises(SandboxError, match="'root' is not in the image's /etc/passwd"):
        image_identity(tmp_path, "root", BASE)


def test_image_skeleton_adds_only_missing_mount_points_and_keeps_the_images_attributes(tmp_path):
    rootfs = tmp_path / "rootfs"
    for name in ("proc", "dev", "tmp", "opt"):
        (rootfs / name).mkdir(parents=True)
    os.chown(rootfs / "opt", BASE + 7, BASE + 7)
    os.chmod(rootfs / "opt", 0o750)
    assert not build_image_skeleton(tmp_path / "none", rootfs, [], BASE, BASE)
    assert not (tmp_path / "none").exists()
    assert build_image_skeleton(tmp_path / "skel", rootfs, ["/opt/venv", "/data/models"], BASE, BASE)
    skel = tmp_path / "skel"
    assert sorted(p.relative_to(skel).as_posix() for p in skel.rglob("*")) == [
        "data", "data/models", "opt", "opt/venv"]
    st = os.stat(skel / "opt")  # the image's /opt keeps its owner and mode in the merged view
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (BASE + 7, 0o750)
    assert os.stat(skel / "data").st_uid == BASE


def test_image_skeleton_gives_an_empty_or_missing_etc_hosts_a_containers_localhost(tmp_path):
    # an exported image keeps the empty /etc/hosts its engine mounted over: "localhost" must still resolve
    rootfs = tmp_path / "rootfs"
    for name in ("proc", "dev", "tmp", "etc"):
        (rootfs / name).mkdir(parents=True)
    os.chown(rootfs / "etc", BASE, BASE)
    os.chmod(rootfs / "etc", 0o751)
    (rootfs / "etc" / "hosts").write_bytes(b"")
    assert build_image_skeleton(tmp_path / "skel", rootfs, [], BASE, BASE)
    hosts = tmp_path / "skel" / "etc" / "hosts"
    assert hosts.read_bytes() == LOOPBACK_HOSTS and b"127.0.0.1\tlocalhost" in LOOPBACK_HOSTS
    assert (os.stat(hosts).st_uid, stat.S_IMODE(os.stat(hosts).st_mode)) == (BASE, 0o644)
    st = os.stat(tmp_path / "skel" / "etc")  # the image's /etc keeps its owner and mode in the merged view
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (BASE, 0o751)
    (rootfs / "etc" / "hosts").unlink()  # missing: the same
    assert build_image_skeleton(tmp_path / "skel2", rootfs, [], BASE, BASE)
    assert (tmp_path / "skel2" / "etc" / "hosts").read_bytes() == LOOPBACK_HOSTS
    (rootfs / "etc" / "hosts").write_text("10.0.0.1 db\n")  # the image's own entries are kept, untouched
    assert not build_image_skeleton(tmp_path / "skel3", rootfs, [], BASE, BASE)
    (rootfs / "etc" / "hosts").unlink()
    (rootfs / "etc" / "hosts").symlink_to("/run/hosts")  # a link is the image's choice too
    assert not build_image_skeleton(tmp_path / "skel4", rootfs, [], BASE, BASE)


def test_task_layer_over_an_image_keeps_the_images_directories(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "srv").mkdir(parents=True)
    os.chown(rootfs / "srv", BASE, BASE)
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("a")
    os.chmod(files, 0o700)  # a private temporary directory: cp -a would give the workdir its mode
    layer = tmp_path / "layer"
    build_task_layer(layer, "/srv/app", files, BASE + 1000, BASE + 1000, rootfs)
    assert os.stat(layer / "srv").st_uid == BASE  # the image's, not host root's (unmapped inside)
    st = os.stat(layer / "srv" / "app")
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (BASE + 1000, 0o755)  # new: the user's, as mkdir makes it
    assert os.stat(layer / "srv" / "app" / "a.txt").st_uid == BASE + 1000


def test_userns_pair_maps_the_image_ids_owns_nothing_of_the_host_and_forbids_nesting():
    outer, inner = linux.userns_pair(BASE, BASE, BASE, IMAGE_IDS)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # as bwrap does: the owner uid enters outer, then inner
        report = []
        try:
            os.setgroups([])
            os.setresgid(BASE, BASE, BASE)
            os.setresuid(BASE, BASE, BASE)
            linux.setns(outer, linux.CLONE_NEWUSER)
            report.append(" ".join(Path("/proc/self/uid_map").read_text().split()))
            report.append(" ".join(Path("/proc/self/gid_map").read_text().split()))
            linux.setns(inner, linux.CLONE_NEWUSER)
            report.append(" ".join(Path("/proc/self/uid_map").read_text().split()))
            report.append(str(os.getuid()))
            try:
                linux.unshare(linux.CLONE_NEWUSER)
                report.append("nested")
            except OSError as e:
                report.append(os.strerror(e.errno) if e.errno else str(e))
        except BaseException as e:  # noqa: BLE001
            report.append(f"error {e}")
        os.write(w, "\n".join(report).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(child, 0)
    lines = os.read(r, 4096).decode().splitlines()
    os.close(r)
    os.close(outer)
    os.close(inner)
    assert lines[:4] == [f"0 {BASE} {IMAGE_IDS}", f"0 {BASE} {IMAGE_IDS}", f"0 0 {IMAGE_IDS}", "0"], lines
    assert "No space left" in lines[4], lines  # max_user_namespaces of outer is spent by inner


def test_sandbox_uid_inside_the_image_range_is_a_config_error():
    with pytest.raises(ValueError, match="sandbox.sandbox_uid = 1000000005 lies in the image id range"):
        SandboxConfig(sandbox_uid=1_000_000_005)
    SandboxConfig(image_uid_base=200_000)  # apart: fine


def test_host_users_and_subordinate_ranges_inside_the_image_ids_are_found(tmp_path):
    passwd, subuid = tmp_path / "passwd", tmp_path / "subuid"
    passwd.write_text("root:x:0:0::/root:/bin/sh\nodd:x:1000000007:1:::/bin/sh\n")
    subuid.write_text("alice:100000:65536\nbob:999990000:10001\n")
    assert host_ids_in_range(BASE, passwd, subuid) == [
        f"user odd (uid 1000000007, {passwd})", f"bob's subordinate ids 999990000..1000000000 ({subuid})"]
    assert host_ids_in_range(2 * BASE, passwd, subuid) == []
    assert host_ids_in_range(BASE) == []  # this host: the default range is free
