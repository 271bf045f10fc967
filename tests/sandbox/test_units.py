"""Pieces of the sandbox stage that need no sandbox: preview, shell protocol, files, layers, host checks."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess

import pytest
from pydantic import ValidationError

from fireflash.sandbox import SandboxConfig, SandboxUnavailable, check_host, make_backend
from fireflash.sandbox.cgroups import detect_mode
from fireflash.sandbox.files import head_tail, read_bytes, write_bytes
from fireflash.sandbox.layers import diff_upper
from fireflash.sandbox.shell import Shell, ShellState, decode_preview, restore_lines, run_line

pytestmark = pytest.mark.unit


def test_preview_whole_and_truncated():
    assert decode_preview(b"abc", b"", 3, "/o") == ("abc", False)
    text, cut = decode_preview(b"head", b"tail", 1000, "/tmp/.fireflash/1.log")
    assert (
        cut
        and text.startswith("head\n[... 992 bytes omitted")
        and text.endswith("/tmp/.fireflash/1.log ...]\ntail")
    )


def test_preview_binary_never_raises():
    text, _ = decode_preview(b"\xff\xfe\x00ok\xc3", b"", 6, "/o")
    assert text == "\ufffd\ufffd\ufffdok\ufffd"


@pytest.mark.parametrize(
    "command", ["echo 'single'", 'echo "$HOME" \\n', "a\nb\n\tc", "it's", "$(rm -rf /)", "\\"]
)
def test_run_line_passes_command_verbatim(command):
    line = run_line(command, "/tmp/out log").decode()
    script = '__ff_run() { printf \'%s|%s\' "$1" "$2"; }; __ff_done() { :; }\n' + line
    assert (
        subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False).stdout
        == f"{command}|/tmp/out log"
    )


def test_restore_lines_restore_cwd_and_exports(tmp_path):
    exports = subprocess.run(
        ["bash", "-c", "export A='x y' B=2; export -p"], capture_output=True, text=True, check=False
    ).stdout
    script = (
        restore_lines(ShellState(cwd=str(tmp_path), exports=exports)).decode().replace(">&3", ">/dev/null")
    )
    out = subprocess.run(
        ["bash", "-c", script + 'echo "$PWD|$A|$B"'], capture_output=True, text=True, check=False
    ).stdout
    assert out.strip().endswith(f"{tmp_path}|x y|2")


def test_shell_parses_records_split_across_reads():
    async def scenario() -> tuple:
        r, w = os.pipe()
        sink_r, sink_w = os.pipe()
        shell = Shell(sink_w, r)
        shell.start(asyncio.get_running_loop())
        done = await shell.send(b"ignored\n", expect_record=True)
        for chunk in (b"H\x0042\x00\x00", b"\x00D\x003\x00/a", b"pp\x00declare -x A=1\n\x00"):
            os.write(w, chunk)
            await asyncio.sleep(0.01)
        rec = await done
        pid = await shell.hello()
        os.close(w)
        await asyncio.sleep(0.01)
        dead = shell.dead
        shell.close()
        os.close(sink_r)
        return pid, rec.kind, rec.fields, dead

    assert asyncio.run(scenario()) == (42, "D", ("3", "/app", "declare -x A=1\n"), True)


def test_files_resolve_inside_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text("host")
    (root / "app" / "abs").symlink_to("/outside.txt")
    (root / "app" / "up").symlink_to("../../../outside.txt")
    (root / "outside.txt").write_text("inside")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        assert read_bytes(fd, "/app/abs") == b"inside"
        assert read_bytes(fd, "up", cwd="/app") == b"inside"
        write_bytes(fd, "/app/new/dir/f.bin", b"\x00\x01", 0o600, None)
        assert (root / "app/new/dir/f.bin").read_bytes() == b"\x00\x01"
        assert stat.S_IMODE((root / "app/new/dir/f.bin").stat().st_mode) == 0o600
        (root / "big").write_bytes(b"a" * 100 + b"b" * 100)
        assert head_tail(fd, "/big", 10) == (200, b"a" * 10, b"b" * 10)
        assert head_tail(fd, "/missing", 10) == (0, b"", b"")
    finally:
        os.close(fd)
    assert (tmp_path / "outside.txt").read_text() == "host"


def test_diff_upper_whiteouts_opaque_and_new_dirs(tmp_path):
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    (lower / "app" / "old").mkdir(parents=True)
    (lower / "app" / "kept").mkdir()
    (upper / "app" / "kept").mkdir(parents=True)  # merely copied up: not listed
    (upper / "app" / "kept" / "changed.txt").write_text("x")
    os.mknod(upper / "app" / "gone.txt", stat.S_IFCHR | 0o000, os.makedev(0, 0))  # whiteout
    (upper / "app" / "old").mkdir()
    os.setxattr(upper / "app" / "old", "trusted.overlay.opaque", b"y")
    (upper / "app" / "fresh" / "sub").mkdir(parents=True)
    assert diff_upper(str(upper), [lower]) == [
        "/app/fresh",
        "/app/fresh/sub",
        "/app/gone.txt",
        "/app/kept/changed.txt",
        "/app/old",
    ]


def test_config_rejects_root_dir_breaking_overlay_options():
    with pytest.raises(ValidationError, match="root_dir"):
        SandboxConfig(root_dir="/dev/shm/a:b")
    with pytest.raises(ValidationError, match="root_dir"):
        SandboxConfig(root_dir="relative/dir")


def test_make_backend_without_bwrap_says_how_to_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="apt-get install -y bubblewrap"):
        make_backend(SandboxConfig(root_dir=str(tmp_path / "root")))


def test_check_host_reports_every_requirement(tmp_path):
    checks = check_host(SandboxConfig(root_dir=str(tmp_path)))
    names = [name for name, _, _ in checks]
    assert names == [
        "root",
        "bubblewrap",
        "user namespaces",
        "overlayfs",
        "sandbox root_dir",
        "openat2",
        "cgroups",
        "disk quota",
    ]
    assert all(isinstance(ok, bool) and detail for _, ok, detail in checks)
    assert check_host(SandboxConfig(backend="unsafe-local"))[0][1] is True


@pytest.mark.sandbox
def test_this_host_is_ready(tmp_path):
    failed = [
        (name, detail) for name, ok, detail in check_host(SandboxConfig(root_dir=str(tmp_path))) if not ok
    ]
    assert failed == []
    assert detect_mode() in ("v1", "v2")


def test_open_in_root_retries_openat2s_eagain(tmp_path, monkeypatch):
    # openat2 with RESOLVE_IN_ROOT answers EAGAIN when a ".." walk raced a mount or rename anywhere on the host
    # (another sandbox starting): a read of "../../etc/x" must retry, not fail the agent's Read
    import ctypes
    import errno

    from fireflash.sandbox import linux

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "x").write_bytes(b"inside")
    real, calls = linux._libc, []

    class Flaky:
        def syscall(self, *args):
            calls.append(args[0])
            if len(calls) <= 3:
                ctypes.set_errno(errno.EAGAIN)
                return -1
            return real.syscall(*args)

    monkeypatch.setattr(linux, "_libc", Flaky())
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_bytes(root, "../../etc/x", cwd="/app") == b"inside" and len(calls) == 4
        calls.clear()
        monkeypatch.setattr(linux, "_OPENAT2_RETRIES", 2)
        with pytest.raises(BlockingIOError):  # past the retries the error stays the kernel's
            read_bytes(root, "/etc/x")
    finally:
        os.close(root)
