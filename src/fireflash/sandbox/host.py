"""Host readiness checks for ``fireflash doctor``: can this machine run the configured sandbox backend?"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fireflash.sandbox import linux
from fireflash.sandbox.cgroups import detect_mode
from fireflash.sandbox.config import SandboxConfig
from fireflash.sandbox.disks import check_disks

Check = tuple[str, bool, str]


def check_bwrap(which=shutil.which) -> Check:
    """bubblewrap installed and able to create namespaces (``which`` is injectable to simulate a host)."""
    exe = which("bwrap")
    if exe is None:
        return ("bubblewrap", False, "not installed: apt-get install -y bubblewrap")
    argv = [exe, "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64"):
        p = Path("/") / name
        argv += (
            ["--symlink", os.readlink(p), f"/{name}"]
            if p.is_symlink()
            else (["--ro-bind", str(p), str(p)] if p.exists() else [])
        )
    done = subprocess.run(
        argv + ["--proc", "/proc", "--dev", "/dev", "true"], capture_output=True, text=True, check=False
    )
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    if done.returncode != 0:
        return (
            "bubblewrap",
            False,
            f"{version} cannot create namespaces: {done.stderr.strip()} (enable user namespaces)",
        )
    return ("bubblewrap", True, f"{version} at {exe}")


def check_userns(proc_root: Path = Path("/proc")) -> Check:
    """User namespaces allowed by the kernel's knobs (``proc_root`` is injectable to simulate a host)."""
    limit = proc_root / "sys/user/max_user_namespaces"
    if limit.exists() and limit.read_text().strip() == "0":
        return ("user namespaces", False, "disabled: sysctl -w user.max_user_namespaces=15000")
    for knob, fix in (
        ("sys/kernel/unprivileged_userns_clone", "sysctl -w kernel.unprivileged_userns_clone=1"),
        (
            "sys/kernel/apparmor_restrict_unprivileged_userns",
            "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        ),
    ):
        p = proc_root / knob
        if p.exists() and p.read_text().strip() == ("0" if "clone" in knob else "1"):
            return ("user namespaces", False, f"restricted by {knob}: {fix}")
    return ("user namespaces", True, "allowed")


def _check_overlay(root_dir: str) -> Check:
    if os.geteuid() != 0:
        return ("overlayfs", False, "mounting needs root: run FireFlash as root (as CI does)")
    if shutil.which("unshare") is None:
        return (
            "overlayfs",
            False,
            "cannot test: util-linux 'unshare' missing (apt-get install -y util-linux)",
        )
    base = root_dir if os.path.isdir(root_dir) else "/dev/shm"
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        for name in ("lower", "upper", "work", "merged"):
            os.mkdir(f"{tmp}/{name}")
        opts = f"lowerdir={tmp}/lower,upperdir={tmp}/upper,workdir={tmp}/work"
        done = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                opts,
                f"{tmp}/merged",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        return (
            "overlayfs",
            False,
            f"mount failed: {done.stderr.strip()} (modprobe overlay; root_dir must not be on overlayfs)",
        )
    return ("overlayfs", True, f"mountable in a private mount namespace (upper dirs on {linux.fs_type(base)})")


def _check_root_dir(root_dir: str) -> Check:
    parent = root_dir
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    fstype = linux.fs_type(parent)
    if fstype == "overlay":
        return (
            "sandbox root_dir",
            False,
            f"{root_dir} is on overlayfs; set sandbox.root_dir to a dir on tmpfs or ext4 (e.g. /dev/shm/...)",
        )
    return ("sandbox root_dir", True, f"{root_dir} on {fstype}")


def check_cgroups(cfg: SandboxConfig) -> Check:
    """Which cgroup version enforces memory / pids / CPU limits (``cfg.cgroup_mode`` forces one)."""
    mode = detect_mode() if cfg.cgroup_mode == "auto" else cfg.cgroup_mode
    detail = {
        "v2": "v2: memory, pids and cpu delegated",
        "v1": "v1: memory, pids and cpu controllers (hybrid host)",
        "none": "none writable: falling back to rlimits (no CPU cap; pids limit counts the sandbox uid host-wide)",
    }[mode]
    return ("cgroups", mode != "none", detail)


def check_host(cfg: SandboxConfig) -> list[Check]:
    """Readiness of this host for ``cfg.backend``, one (name, ok, detail-or-fix) per requirement."""
    if cfg.backend == "unsafe-local":
        return [("backend", True, "unsafe-local: plain subprocesses, NO isolation (debugging only)")]
    checks: list[Check] = [
        (
            "root",
            os.geteuid() == 0,
            "running as root" if os.geteuid() == 0 else "the bwrap backend must run as root (as CI does)",
        )
    ]
    checks.append(check_bwrap())
    checks.append(check_userns())
    checks.append(_check_overlay(cfg.root_dir))
    checks.append(_check_root_dir(cfg.root_dir))
    checks.append(("openat2", linux.openat2_available(), "safe file access inside sandboxes (Linux >= 5.6)"))
    checks.append(check_cgroups(cfg))
    checks.append(check_disks(cfg))
    return checks
