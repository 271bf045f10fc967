"""Security suite (issues 3, 26): escape and abuse attempts, each asserting it fails or is contained.

Every test runs twice: on the host's userland (the agent is uid 1000) and forked from an image (marker
``images``: conftest.sandbox_image, root inside a user namespace). Where root inside an image may do
what the host's uid 1000 may not (write /usr, read /etc/shadow), the test checks that what it reaches is
the image's own copy in its overlay, never the host's nor the exported rootfs, and that the image's
non-root user is refused as uid 1000 is. Limits are small (64 MiB memory, 48 pids, 16 MiB disk, 8 MiB
/tmp, a quarter core) so the abusive cases finish fast. Every sandbox is checked on close to leave no
process, mount, cgroup or directory.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from fireflash.protocols import TaskEnvironment
from fireflash.sandbox import SandboxConfig, procs
from fireflash.sandbox.identity import ROOT_CAPS

pytestmark = pytest.mark.sandbox

SECRET = "fireflash-host-secret-7d1e"


@pytest.fixture(scope="module")
def cfg(root_dir: str, image_rootfs_dir: str) -> SandboxConfig:
    return SandboxConfig(
        root_dir=root_dir,
        cgroup_pool_size=1,
        kill_grace_sec=0.5,
        preview_chars=400,
        tmp_size_mb=8,
        output_size_mb=8,
        image_rootfs_dir=image_rootfs_dir,
    )


@pytest.fixture(scope="module", params=["host", pytest.param("image", marks=pytest.mark.images)])
def userland(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def env(task_files: Path, userland: str, request: pytest.FixtureRequest) -> TaskEnvironment:
    image = request.getfixturevalue("sandbox_image") if userland == "image" else None
    return TaskEnvironment(files_dir=task_files, memory_mb=64, pids_max=48, storage_mb=16, cpus=0.25, image=image)


@pytest.fixture(scope="module")
def parent(run, backend, env: TaskEnvironment, userland: str):
    return run(backend.prepare(env, f"test-task-{userland}"))


def sh(run, sandbox, command: str, timeout_sec: float = 10.0):
    return run(sandbox.exec(command, timeout_sec=timeout_sec))


def image_file(sandbox, path: str) -> bytes:
    """``path`` as the image's exported rootfs has it (the sandbox's lowest layer)."""
    return (sandbox.backend._rootfs[sandbox.env.image][0].path / path.lstrip("/")).read_bytes()


def as_agent(run, sandbox):
    """A fork of an image-backed sandbox as the image's non-root user (uid 1000, as on the host's userland)."""
    return run(sandbox.fork(user="agent"))


# ── network ──


def test_outside_ipv4_unreachable(run, sandbox):
    r = sh(run, sandbox, "echo > /dev/tcp/1.1.1.1/53")
    assert r.exit_code != 0 and "unreachable" in r.preview


def test_outside_ipv6_unreachable(run, sandbox):
    r = sh(run, sandbox, "echo > /dev/tcp/2606:4700:4700::1111/53")
    assert r.exit_code != 0


def test_dns_fails(run, sandbox):
    assert sh(run, sandbox, "getent hosts example.com").exit_code != 0


def test_host_loopback_listener_unreachable(run, sandbox):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        r = sh(run, sandbox, f"echo hi > /dev/tcp/127.0.0.1/{port}")
        assert r.exit_code != 0 and "refused" in r.preview
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()


def test_host_abstract_unix_socket_unreachable(run, sandbox):
    name = f"\0fireflash-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(name)
        server.listen()
        code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({name!r})"
        r = sh(run, sandbox, f'python3 -c "{code}"')
        assert r.exit_code != 0 and ("ConnectionRefused" in r.preview or "FileNotFound" in r.preview)


def test_only_loopback_interface(run, sandbox):
    r = sh(run, sandbox, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert r.preview.split() == ["lo"]


# ── files ──


def test_etc_shadow_unreadable(run, sandbox):
    if sandbox.identity.image:  # root reads the image's own shadow, never the host's; its other users cannot
        assert run(sandbox.read_file("/etc/shadow")) == image_file(sandbox, "/etc/shadow") != Path("/etc/shadow").read_bytes()
        sandbox = as_agent(run, sandbox)
    r = sh(run, sandbox, "cat /etc/shadow")
    assert r.exit_code != 0 and "Permission denied" in r.preview
    if sandbox.identity.image:
        run(sandbox.close())


def test_host_home_not_visible(run, sandbox):
    assert Path("/root").exists()
    if sandbox.identity.image:  # /root is the image's
        listing = sh(run, sandbox, "ls -A /root").preview.split()
        assert sorted(listing) == sorted(os.listdir(sandbox.backend._rootfs[sandbox.env.image][0].path / "root"))
        assert not set(listing) & (set(os.listdir("/root")) - set(listing))
        return
    r = sh(run, sandbox, "ls -A /root; cat /root/.bashrc")
    assert r.exit_code != 0 and "No such file" in r.preview


def test_repo_and_host_tmp_not_visible(run, sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    r = sh(run, sandbox, f"ls /work; cat {secret}; cat {__file__}; grep -r {SECRET} /tmp /app 2>/dev/null")
    assert r.exit_code != 0 and SECRET not in r.preview.replace(f"grep -r {SECRET}", "")


def test_system_dirs_read_only(run, sandbox):
    r = sh(run, sandbox, "touch /usr/bin/ff-evil /etc/ff-evil /bin/ff-evil")
    if sandbox.identity.image:  # root writes its overlay: neither the image's rootfs nor the host's /usr
        assert r.exit_code == 0 and sh(run, sandbox, "ls /usr/bin/ff-evil").exit_code == 0
        with pytest.raises(FileNotFoundError):
            image_file(sandbox, "/usr/bin/ff-evil")
        agent = as_agent(run, sandbox)
        r = sh(run, agent, "touch /usr/bin/ff-evil2 /etc/ff-evil2 /bin/ff-evil2")
        run(agent.close())
        assert r.preview.count("Permission denied") == 3
    else:
        assert r.preview.count("Read-only file system") == 3
    assert not Path("/usr/bin/ff-evil").exists() and not Path("/etc/ff-evil").exists()


def test_top_level_dirs_stay_inside(run, sandbox):
    if sandbox.identity.image:  # root may rename and delete the image's files, in its overlay only
        r = sh(run, sandbox, "mkdir /ff-evil && touch /ff-evil/x && echo made; rm /etc/hostname && echo removed")
        assert r.preview.split() == ["made", "removed"] and not Path("/ff-evil").exists()
        assert Path("/etc/hostname").exists() and image_file(sandbox, "/etc/hostname")
        return
    r = sh(run, sandbox, "mkdir /ff-evil && touch /ff-evil/x && echo made; mv /usr /usr2; rm /etc/hostname")
    assert r.preview.startswith("made") and not Path("/ff-evil").exists()
    assert "Device or resource busy" in r.preview and "Read-only file system" in r.preview
    assert Path("/usr/bin/bash").exists()


def test_host_read_file_does_not_follow_links_out(run, sandbox):
    sh(
        run,
        sandbox,
        "ln -s /etc/shadow /app/l1; ln -s /root/.bashrc /app/l2; ln -s ../../../../../../etc/shadow /app/l3",
    )
    if sandbox.identity.image:  # root's reads: the image's own files, resolved inside the sandbox
        shadow = image_file(sandbox, "/etc/shadow")
        assert run(sandbox.read_file("/app/l1")) == shadow == run(sandbox.read_file("/app/l3"))
        assert run(sandbox.read_file("/app/l2")) == image_file(sandbox, "/root/.bashrc")
        assert shadow != Path("/etc/shadow").read_bytes()
        sandbox = as_agent(run, sandbox)
    with pytest.raises(PermissionError):
        run(sandbox.read_file("/app/l1"))  # the sandbox's own /etc/shadow, read with the sandbox uid
    with pytest.raises(FileNotFoundError if not sandbox.identity.image else PermissionError):
        run(sandbox.read_file("/app/l2"))  # resolved inside: the sandbox's /root is empty (the image's: closed)
    with pytest.raises(PermissionError):
        run(sandbox.read_file("/app/l3"))  # '..' stops at the sandbox root
    if sandbox.identity.image:
        run(sandbox.close())


def test_host_write_file_through_link_stays_inside(run, sandbox, tmp_path):
    target = tmp_path / "host-target.txt"
    target.write_text("untouched")
    sh(run, sandbox, f"ln -s /etc/passwd /app/w1; mkdir -p {target.parent}; ln -s {target} /app/w2")
    host_passwd = Path("/etc/passwd").read_bytes()
    if sandbox.identity.image:  # root may write the image's /etc/passwd: in its overlay
        run(sandbox.write_file("/app/w1", b"evil"))
        assert sh(run, sandbox, "cat /etc/passwd").preview == "evil" and image_file(sandbox, "/etc/passwd") != b"evil"
    else:
        with pytest.raises(OSError):
            run(sandbox.write_file("/app/w1", b"evil"))
    assert Path("/etc/passwd").read_bytes() == host_passwd
    run(sandbox.write_file("/app/w2", b"inside"))  # lands in the sandbox's own /tmp
    assert target.read_text() == "untouched"
    assert sh(run, sandbox, f"cat {target}").preview == "inside"


def test_output_file_replaced_by_link_leaks_nothing(run, sandbox):
    r = sh(run, sandbox, "true")
    n = int(Path(r.output_path).stem)
    sh(run, sandbox, f"ln -sf /etc/shadow /tmp/.fireflash/{n + 2}.log")
    r = sh(run, sandbox, "echo next")
    assert "root:" not in r.preview


def test_proc_root_magic_link_blocked(run, sandbox):
    with pytest.raises(OSError):
        run(sandbox.read_file("/proc/1/root/etc/shadow"))
    r = sh(run, sandbox, "sha256sum < /proc/1/root/etc/shadow")
    if sandbox.identity.image:  # its own pid 1's root is its own root: the image's shadow
        assert r.preview.split()[0] == hashlib.sha256(image_file(sandbox, "/etc/shadow")).hexdigest()
    else:
        assert r.exit_code != 0


def test_hard_link_to_protected_file_denied(run, sandbox):
    agent = as_agent(run, sandbox) if sandbox.identity.image else sandbox  # root owns the image's shadow
    r = sh(run, agent, "ln /etc/shadow /app/hard")
    assert r.exit_code != 0
    if agent is not sandbox:
        run(agent.close())


def test_fork_snapshot_copies_links_not_targets(run, sandbox):
    sh(run, sandbox, "ln -s /etc/shadow /app/snap-link")
    child = run(sandbox.fork())
    try:
        assert run(child.exec("readlink /app/snap-link")).preview == "/etc/shadow\n"
        r = run(child.exec("sha256sum < /app/snap-link"))
        if sandbox.identity.image:  # the link resolves in the child, to the image's own file
            assert r.preview.split()[0] == hashlib.sha256(image_file(sandbox, "/etc/shadow")).hexdigest()
        else:
            assert r.exit_code != 0
    finally:
        run(child.close())


# ── processes, privileges, kernel ──


def test_host_processes_invisible(run, sandbox):
    r = sh(run, sandbox, "ls /proc | grep -c '^[0-9]'")
    assert int(r.preview.strip()) < 10  # keeper, shell, its wrapper-less children
    assert str(os.getpid()) not in sh(run, sandbox, "ps -eo pid,args").preview.split()


def test_cannot_signal_host_process(run, sandbox):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        r = sh(run, sandbox, f"kill -9 {victim.pid}")
        assert r.exit_code != 0
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_cannot_ptrace_host_process(run, sandbox):
    r = sh(run, sandbox, f"strace -p {os.getpid()} -o /dev/null", timeout_sec=5)
    assert r.exit_code != 0 and not r.timed_out


def test_kill_all_from_inside_does_not_kill_the_sandbox(run, sandbox):
    sh(run, sandbox, "kill -9 -1")
    assert sh(run, sandbox, "echo alive").preview == "alive\n"


def test_mount_and_new_user_namespace_denied(run, sandbox):
    r = sh(run, sandbox, "mount -t tmpfs none /mnt; unshare -rm true; unshare -U true")
    assert r.exit_code != 0
    assert r.preview.count("mount") >= 1 and "unshare failed" in r.preview


def test_kernel_module_load_denied(run, sandbox):
    code = "import ctypes, os; r = ctypes.CDLL(None, use_errno=True).syscall(313, 0, b'', 0); print(r, os.strerror(ctypes.get_errno()))"
    r = sh(run, sandbox, f'python3 -c "{code}"; modprobe dummy')
    assert r.preview.startswith("-1 ") and r.exit_code != 0


def test_no_capabilities_and_no_new_privs_also_after_restart(run, sandbox):
    # image: root holds a container's capabilities (no CAP_SYS_ADMIN...) inside its user namespace only
    caps, uid = (f"{sum(1 << n for n in ROOT_CAPS.values()):016x}", "0") if sandbox.identity.image else ("0" * 16, "1000")
    for _ in range(2):
        r = sh(run, sandbox, "grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status; id -u")
        fields = dict(line.split(":\t") for line in r.preview.splitlines()[:3])
        assert fields == {"CapPrm": caps, "CapEff": caps, "NoNewPrivs": "1"}
        assert r.preview.splitlines()[3] == uid
        sh(run, sandbox, "exit 1")  # the next shell joins the sandbox another way
    assert not int(caps, 16) & (1 << 21)  # CAP_SYS_ADMIN


def test_setuid_binaries_do_not_elevate(run, sandbox):
    agent = as_agent(run, sandbox) if sandbox.identity.image else sandbox  # root has nothing to gain
    r = sh(run, agent, "su -c 'id -u' root; sudo -n id -u; id -u")
    assert r.preview.strip().splitlines()[-1] == "1000" and "\n0\n" not in f"\n{r.preview}"
    if agent is not sandbox:
        run(agent.close())


def test_limits_and_cgroups_cannot_be_changed(run, sandbox):
    r = sh(
        run,
        sandbox,
        "ulimit -Hn unlimited; ls /sys/fs/cgroup; echo 999999 > /proc/sys/kernel/pid_max; hostname evil",
    )
    assert r.exit_code != 0
    assert "Operation not permitted" in r.preview or "cannot modify limit" in r.preview
    assert socket.gethostname() != "evil"


def test_environment_has_no_host_variables(run, sandbox, monkeypatch):
    monkeypatch.setenv("FIREFLASH_SECRET_TEST", SECRET)
    r = sh(run, sandbox, "env; exit 2")  # the restarted shell gets its environment another way
    r2 = sh(run, sandbox, "env")
    assert SECRET not in r.preview and SECRET not in r2.preview and "PATH=" in r2.preview


def test_minimal_dev_and_no_sys(run, sandbox):
    r = sh(run, sandbox, "ls /dev; ls -A /sys | wc -l")
    assert "vda" not in r.preview and "sda" not in r.preview and r.preview.split()[-1] == "0"  # an image's /sys: empty


# ── resources ──


def test_fork_bomb_contained_and_host_responsive(run, sandbox):
    job = run(sandbox.exec(":(){ :|:& };:", background=True)).job_id
    time.sleep(0.5)
    started = time.monotonic()
    subprocess.run(["true"], check=True)
    assert time.monotonic() - started < 2.0
    slot = sandbox._slot
    pids_max = int((slot.cgroup.dirs["pids"] / "pids.max").read_text())
    bomb = [p for p in slot.cgroup.pids() if p != slot.launcher.pid]
    assert len(bomb) + 1 <= pids_max
    started = {p: _start_time(p) for p in bomb}
    run(sandbox.kill_job(job))
    run(sandbox.close())
    assert not [p for p in bomb if _start_time(p) == started[p] != "" and procs.alive(p)]


def test_memory_hog_killed(run, sandbox):
    r = sh(run, sandbox, "python3 -c 'b = bytearray(300 * 1024 * 1024); print(len(b))'", timeout_sec=20)
    assert r.exit_code not in (0, None) and "314572800" not in r.preview
    assert sh(run, sandbox, "echo alive").preview == "alive\n"


def test_disk_fill_capped(run, sandbox):
    r = sh(run, sandbox, "dd if=/dev/zero of=/app/fill bs=1M count=64", timeout_sec=20)
    assert r.exit_code != 0 and "No space left" in r.preview
    r = sh(
        run, sandbox, "dd if=/dev/zero of=/tmp/fill bs=1M count=64; rm -f /tmp/fill /app/fill", timeout_sec=20
    )
    assert "No space left" in r.preview
    assert sh(run, sandbox, "echo alive").preview == "alive\n"


def test_huge_output_capped_by_output_size(run, sandbox):
    started = time.monotonic()
    r = sh(run, sandbox, "yes 0123456789 | head -c 100000000", timeout_sec=20)
    assert r.output_size_bytes <= 8 * 1024 * 1024 and time.monotonic() - started < 10
    assert len(r.preview) < 1000


def test_runaway_cpu_throttled(run, sandbox):
    code = "import time; t = time.time()\nwhile time.time() - t < 1.0: pass\nprint(time.process_time())"
    r = sh(run, sandbox, f"python3 -c '{code}'", timeout_sec=20)
    assert r.exit_code == 0 and float(r.preview.strip()) < 0.6  # quota: 0.25 core


def test_command_that_never_exits_is_killed(run, sandbox):
    r = sh(run, sandbox, "tail -f /dev/null", timeout_sec=0.3)
    assert r.timed_out and r.exit_code is None
    assert sh(run, sandbox, "pgrep -c tail; echo alive").preview.splitlines()[-2:] == ["0", "alive"]


def test_command_closing_stdout_early(run, sandbox):
    r = sh(run, sandbox, "exec >&- 2>&-; sleep 0.1; echo gone")
    assert r.exit_code is not None and not r.timed_out
    r = sh(run, sandbox, "python3 -c 'import os; os.close(1); os.close(2)'; echo $?")
    assert r.preview == "0\n"


def test_double_forked_daemons_die_on_close(run, parent):
    sandbox = run(parent.fork())
    try:
        started = time.monotonic()
        r = sh(
            run,
            sandbox,
            "( setsid sleep 300 & ); nohup sleep 301 >/dev/null 2>&1 & disown; ( ( sleep 302 & ) & ); echo started",
        )
        assert r.preview == "started\n" and time.monotonic() - started < 5
        slot = sandbox._slot
        survivors = {p: _start_time(p) for p in slot.cgroup.pids() if p != slot.launcher.pid}
        assert len(survivors) >= 3
    finally:
        run(sandbox.close())
    assert [p for p in slot.cgroup.pids() if p != slot.launcher.pid] == []
    # killed but not yet reaped by the host's init (a zombie) is dead: it runs nothing and holds nothing
    assert not [p for p, t in survivors.items() if _start_time(p) == t != "" and procs.alive(p)]


def _start_time(pid: int) -> str:
    """Start time of a process (clock ticks since boot), '' when gone: a pid reused later differs."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return ""


def test_huge_outputs_do_not_starve_later_commands(run, sandbox):
    for _ in range(3):  # 3 MB each against an 8 MB output tmpfs: old outputs must make room
        r = sh(run, sandbox, "head -c 3000000 /dev/zero | tr '\\0' a", timeout_sec=20)
        assert r.exit_code == 0 and r.output_size_bytes == 3_000_000
    r = sh(run, sandbox, "echo small; ls /tmp/.fireflash | wc -l")
    assert r.preview.startswith("small\n") and int(r.preview.split()[1]) <= 3


def test_output_deleted_for_size_is_not_named(run, sandbox):
    # 5 MB alone exceeds the 4 MiB output budget (half of output_size_mb): the file is deleted at once
    r = sh(run, sandbox, "head -c 5000000 /dev/zero | tr '\\0' a", timeout_sec=20)
    assert r.exit_code == 0 and r.output_size_bytes == 5_000_000 and not r.output_kept
    assert r.output_path not in r.preview and "was not kept (it alone exceeds the sandbox's output budget" in r.preview
    with pytest.raises(FileNotFoundError):
        run(sandbox.read_file(r.output_path))
    small = sh(run, sandbox, "echo small")
    assert small.output_kept and run(sandbox.read_file(small.output_path)) == b"small\n"


def test_a_read_only_bind_refuses_a_symlinked_mount_point(tmp_path):
    """The launcher binds the verifier's tools as host root into the sandbox's tree: a symlink the agent left
    at the mount point (in the state a fork starts from) must not aim the mount at a host directory."""
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("mounts need root")
    root, victim, tools = tmp_path / "root", tmp_path / "host-dir", tmp_path / "tools"
    for d in (root, victim, tools):
        d.mkdir()
    (tools / "uv").write_text("staged")
    (root / ".fireflash-verifier").symlink_to(victim)  # an absolute link: a host path outside the root
    linux = Path(__file__).parents[2] / "src" / "fireflash" / "sandbox" / "linux.py"
    code = (
        "import importlib.util, errno, os\n"
        f"spec = importlib.util.spec_from_file_location('l', {str(linux)!r}); l = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(l)\n"
        "l.unshare(l.CLONE_NEWNS); l.make_mounts_private()\n"
        "try:\n"
        f"    l.bind_read_only({str(tools)!r}, {str(root)!r}, '/.fireflash-verifier')\n"
        "except OSError as e:\n"
        "    print('refused', errno.errorcode[e.errno])\n"
        f"print(sorted(os.listdir({str(victim)!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    refused, listing = done.stdout.split("\n")[:2]
    assert refused in ("refused ELOOP", "refused ENOTDIR") and listing == "[]", done.stdout + done.stderr
