"""Image-backed sandboxes (issue 26): the image's files under the overlay, root inside a user namespace.

The image is fixtures/image-task (conftest.sandbox_image: Debian trixie with python3, procps, strace and a
user ``agent``, uid 1000), built with the host's podman on first use. Every sandbox is checked on close
to leave nothing behind, and the image's exported rootfs and the host to be untouched.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from fireflash.protocols import TaskEnvironment
from fireflash.sandbox import SandboxConfig, SandboxError
from fireflash.sandbox.identity import ROOT_CAPS

pytestmark = [pytest.mark.sandbox, pytest.mark.images]

BASE = SandboxConfig().image_uid_base
ROOT_CAPS_HEX = f"{sum(1 << n for n in ROOT_CAPS.values()):016x}"

DEB = r"""set -e
mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/bin
printf 'Package: ff-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n' \
  > /tmp/pkg/DEBIAN/control
printf '#!/bin/sh\necho hello from a package\n' > /tmp/pkg/usr/bin/ff-hello
chmod 755 /tmp/pkg/usr/bin/ff-hello
dpkg-deb --root-owner-group --build /tmp/pkg /tmp/ff-hello.deb >/dev/null
"""


@pytest.fixture(scope="module")
def cfg(root_dir: str, image_rootfs_dir: str) -> SandboxConfig:
    return SandboxConfig(
        root_dir=root_dir, cgroup_pool_size=1, kill_grace_sec=0.3, preview_chars=2000, image_rootfs_dir=image_rootfs_dir
    )


@pytest.fixture(scope="module")
def env(sandbox_image: str, task_files: Path) -> TaskEnvironment:
    return TaskEnvironment(
        image=sandbox_image, files_dir=task_files, memory_mb=256, pids_max=128, storage_mb=64, verifier_user="root"
    )


def sh(run, sandbox, command: str, timeout_sec: float = 30.0):
    return run(sandbox.exec(command, timeout_sec=timeout_sec))


def _rootfs(backend, env) -> Path:
    return backend._rootfs[env.image][0].path


def _status(pid: int, field: str) -> list[str]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return line.split()[1:]
    return []


def test_root_inside_is_an_unprivileged_host_uid_with_a_containers_capabilities(run, sandbox):
    r = sh(run, sandbox, "id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status; echo $HOME; pwd")
    lines = r.preview.splitlines()
    assert lines[:2] == ["0", "0"] and lines[-2:] == ["/root", "/app"], r.preview
    fields = dict(line.split(":\t") for line in lines[2:5])
    assert fields == {"CapPrm": ROOT_CAPS_HEX, "CapEff": ROOT_CAPS_HEX, "NoNewPrivs": "1"}
    assert _status(sandbox._init_pid, "Uid")[0] == str(BASE)  # on the host: never uid 0
    assert run(sandbox.read_file("/app/hello.txt")) == b"hello from the task\n"  # the task's files dir
    sh(run, sandbox, "exit 1")  # the next shell joins the sandbox through the launcher
    r = sh(run, sandbox, "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status")
    assert r.preview.split() == ["0", "CapEff:", ROOT_CAPS_HEX, "CapBnd:", ROOT_CAPS_HEX, "NoNewPrivs:", "1"]


def test_localhost_resolves_offline_as_in_a_container(run, sandbox):
    # the exported image's /etc/hosts is the empty placeholder podman mounted over; TB2 tests use localhost
    r = sh(run, sandbox, "getent hosts localhost; python3 -c \"import socket; print(socket.gethostbyname('localhost'))\"")
    assert r.exit_code == 0 and r.preview.split()[-1] == "127.0.0.1" and "localhost" in r.preview, r.preview


def test_root_installs_a_package_into_its_overlay_not_the_image_or_host(run, backend, env, sandbox):
    r = sh(run, sandbox, DEB + "apt-get install -y -q /tmp/ff-hello.deb >/tmp/apt.log 2>&1 || cat /tmp/apt.log\n"
           "ff-hello; dpkg -s ff-hello | grep ^Status; ls -ln /usr/bin/ff-hello | cut -d' ' -f3,4")
    assert r.exit_code == 0 and r.preview.splitlines() == [
        "hello from a package", "Status: install ok installed", "0 0"], r.preview
    r = sh(run, sandbox, "useradd -m -u 1234 newuser && chown newuser /app/hello.txt && stat -c %U /app/hello.txt "
           "&& echo 'x' > /etc/ff-marker && rm /usr/bin/perl* 2>/dev/null; ls /usr/bin/perl 2>&1 | head -1")
    assert r.preview.splitlines()[0] == "newuser" and "No such file" in r.preview
    assert {"/usr/bin/ff-hello", "/etc/passwd", "/etc/ff-marker"} <= set(run(sandbox.diff()))
    rootfs = _rootfs(backend, env)
    assert not (rootfs / "usr/bin/ff-hello").exists() and not (rootfs / "etc/ff-marker").exists()
    assert "newuser" not in (rootfs / "etc/passwd").read_text() and "ff-hello" not in (
        rootfs / "var/lib/dpkg/status").read_text()
    assert (rootfs / "usr/bin/perl").exists() or not (rootfs / "usr/bin").exists()  # deleted in the overlay only
    assert not Path("/usr/bin/ff-hello").exists() and not Path("/etc/ff-marker").exists()
    child = run(sandbox.fork())  # the fork sees the package, owned as it was
    try:
        r = run(child.exec("ff-hello; stat -c '%U %u' /usr/bin/ff-hello /app/hello.txt"))
        assert r.preview.splitlines() == ["hello from a package", "root 0", "newuser 1234"]
    finally:
        run(child.close())
    assert os.stat(rootfs / "usr/bin/bash").st_uid == BASE


def test_a_non_root_user_cannot_write_the_images_files_and_the_verifier_fork_is_root(run, sandbox):
    sh(run, sandbox, "echo from-root > /app/root.txt")
    agent = run(sandbox.fork(user="agent"))
    try:
        r = run(agent.exec("id -un; echo $HOME; grep ^CapEff /proc/self/status; touch /usr/bin/x; cat /app/root.txt; "
                           "echo mine > /home/agent/a.txt"))
        lines = r.preview.splitlines()
        assert lines[:3] == ["agent", "/home/agent", "CapEff:\t0000000000000000"], r.preview
        assert "Permission denied" in lines[3] and lines[4] == "from-root"
        assert _status(agent._init_pid, "Uid")[0] == str(BASE + 1000)
        run(agent.exec("exit 1"))  # a shell started by joining the sandbox is the same user, as bare
        r = run(agent.exec("id -un; grep -E '^Cap(Eff|Bnd)' /proc/self/status"))
        assert r.preview.split() == ["agent", "CapEff:", "0" * 16, "CapBnd:", "0" * 16]
        with pytest.raises(PermissionError):
            run(agent.write_file("/usr/bin/evil", b"x"))  # the host writes as the sandbox's user, too
        run(agent.write_file("/home/agent/b.txt", b"b"))
        verifier = run(agent.fork(user="root"))
        try:
            r = run(verifier.exec("id -u; stat -c '%U' /home/agent/a.txt /home/agent/b.txt; touch /usr/bin/ok && echo ok"))
            assert r.preview.splitlines() == ["0", "agent", "agent", "ok"]
        finally:
            run(verifier.close())
    finally:
        run(agent.close())


def test_users_are_checked_when_the_parent_is_prepared(run, backend, env):
    with pytest.raises(SandboxError, match=r"user 'ghost' is not in the image's /etc/passwd"):
        run(backend.prepare(env.model_copy(update={"user": "ghost"}), "ghost-task"))
    with pytest.raises(SandboxError, match=r"group 'wheel'"):
        run(backend.prepare(env.model_copy(update={"verifier_user": "agent:wheel"}), "ghost-verifier"))


def test_close_leaves_no_process_in_the_sandboxes_user_namespaces(run, parent):
    child = run(parent.fork())
    run(child.exec("sleep 300 & (setsid sleep 301 &); true"))
    inner = os.readlink(f"/proc/{child._init_pid}/ns/user")
    run(child.close())

    def left() -> list[str]:
        found = []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.readlink(f"/proc/{name}/ns/user") == inner:
                    found.append(name)
            except OSError:
                pass
        return found

    # every process was SIGKILLed (the pid namespace's init died) before close returned, but the kernel may
    # still be tearing one down: a few tries apart tell that from a survivor, which stays
    for _ in range(50):
        if not left():
            break
        time.sleep(0.1)
    assert left() == []


def test_image_ids_never_include_host_root(run, sandbox):
    """Files of the host that are not the image's (none visible but /proc's) read as the overflow id."""
    r = sh(run, sandbox, "cat /proc/self/uid_map /proc/self/gid_map; stat -c %u /proc/1/root 2>&1 | tail -1")
    assert r.preview.split()[:6] == ["0", "0", "65536", "0", "0", "65536"]


def test_ro_binds_are_mounted_read_only_in_image_sandboxes_too(run, cfg, env, root_dir):
    from fireflash.sandbox import make_backend

    data = Path(f"{root_dir}-data")  # readable by everyone, as ro_binds must be
    data.mkdir(mode=0o755)
    (data / "x.txt").write_text("shared\n")
    backend = make_backend(cfg.model_copy(update={"ro_binds": {"/srv/data/models": str(data)}, "prefork": 0}))
    try:
        sandbox = run(run(backend.prepare(env, "ro-binds")).fork())
        r = run(sandbox.exec("cat /srv/data/models/x.txt; touch /srv/data/models/y; stat -c %U /srv/data/models/x.txt"))
        assert r.preview.splitlines()[0] == "shared" and "Read-only file system" in r.preview
        assert r.preview.splitlines()[-1] == "nobody"  # a host file: its owner is not mapped inside
        assert "/srv/data" not in run(sandbox.diff())  # the mount point is in a layer, not the sandbox's writes
    finally:
        run(backend.close())
        assert not (data / "y").exists()
        shutil.rmtree(data)


def test_staged_verifier_tools_are_read_only_for_root_and_need_no_host_path_access(run, cfg, env, tmp_path):
    """Issue 26: the verifier's staged uv and wheels (TaskEnvironment.verifier_tools) sit in a host directory the
    image's ids cannot even reach (under a 0700 one); root inside reads them but cannot write, remount or unmount
    them, and a fork of its final state (the verifier's) sees the staged files, not anything it left."""
    from fireflash.protocols import VERIFIER_TOOLS_DIR
    from fireflash.sandbox import make_backend

    hidden = tmp_path / "private"  # pytest's tmp dirs are 0700 root: no image id can traverse them
    (hidden / "tools" / "bin").mkdir(parents=True)
    (hidden / "tools" / "bin" / "uv").write_text("#!/bin/sh\necho staged uv\n")
    (hidden / "tools" / "bin" / "uv").chmod(0o755)
    os.chmod(hidden, 0o700)
    backend = make_backend(cfg.model_copy(update={"prefork": 0}))
    try:
        parent = run(backend.prepare(env.model_copy(update={"verifier_tools": hidden / "tools"}), "tools"))
        agent = run(parent.fork())
        attack = (
            f"{VERIFIER_TOOLS_DIR}/bin/uv; echo evil > {VERIFIER_TOOLS_DIR}/bin/uv; "
            f"mount -o remount,rw {VERIFIER_TOOLS_DIR}; umount -l {VERIFIER_TOOLS_DIR}; rm -rf {VERIFIER_TOOLS_DIR}; "
            f"mv {VERIFIER_TOOLS_DIR} /moved; echo done"
        )
        r = sh(run, agent, attack)
        assert r.preview.splitlines()[0] == "staged uv" and "Read-only file system" in r.preview, r.preview
        grading = run(agent.fork(user="root"))  # what the verifier forks
        assert sh(run, grading, f"{VERIFIER_TOOLS_DIR}/bin/uv").preview == "staged uv\n"
        assert (hidden / "tools" / "bin" / "uv").read_text() == "#!/bin/sh\necho staged uv\n"
        assert not any("fireflash-verifier" in path for path in run(agent.diff()))
    finally:
        run(backend.close())
