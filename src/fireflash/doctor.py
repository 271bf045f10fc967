"""`fireflash doctor`: is this host ready to run FireFlash? Each failing check names its fix.

Every check is a plain function whose host-facing inputs (paths, version tuples, lookups) are
parameters with the real host as default, so tests simulate a broken host without patching.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> Check:
    shown = ".".join(map(str, version))
    if version >= (3, 11):
        return Check("python", True, shown)
    return Check("python", False, shown, "install Python >= 3.11 and recreate .venv (make clean-venv setup)")


def check_torch() -> Check:
    try:
        import torch
    except ImportError as e:
        return Check("torch", False, f"not importable: {e}", "make setup (installs torch==2.13.0 CPU build here)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return Check("torch", True, f"{torch.__version__}, {device}, {torch.get_num_threads()} threads, {os.cpu_count()} cores")


def check_bwrap(which: Callable[[str], str | None] = shutil.which) -> Check:
    path = which("bwrap")
    if path:
        return Check("bubblewrap", True, path)
    return Check("bubblewrap", False, "bwrap not on PATH", "apt-get install -y bubblewrap (Debian/Ubuntu)")


def check_user_namespaces(proc_root: Path = Path("/proc")) -> Check:
    max_ns = proc_root / "sys/user/max_user_namespaces"
    clone = proc_root / "sys/kernel/unprivileged_userns_clone"
    if max_ns.is_file() and int(max_ns.read_text().strip() or 0) == 0:
        return Check("user namespaces", False, "user.max_user_namespaces = 0", "sysctl -w user.max_user_namespaces=15000")
    if clone.is_file() and clone.read_text().strip() == "0":
        return Check(
            "user namespaces", False, "kernel.unprivileged_userns_clone = 0",
            "sysctl -w kernel.unprivileged_userns_clone=1 (or run as root)",
        )
    if not (proc_root / "self/ns/user").exists():
        return Check("user namespaces", False, "kernel without user namespaces", "use a kernel with CONFIG_USER_NS=y")
    return Check("user namespaces", True, "available")


def check_cgroups(cgroup_root: Path = Path("/sys/fs/cgroup")) -> Check:
    """Which controllers the sandbox can use for memory / pids / CPU limits: v2, v1, or none."""
    v2 = cgroup_root / "cgroup.controllers"
    v2_controllers = set(v2.read_text().split()) if v2.is_file() else set()
    unified = cgroup_root / "unified"
    if not v2_controllers and (unified / "cgroup.controllers").is_file():
        v2_controllers = set((unified / "cgroup.controllers").read_text().split())
    v1 = {c for c in ("memory", "pids", "cpu") if (cgroup_root / c).is_dir() and any((cgroup_root / c).iterdir())}
    wanted = {"memory", "pids", "cpu"}
    if wanted <= v2_controllers:
        return Check("cgroups", True, "v2 with memory, pids, cpu")
    if wanted <= v1 | v2_controllers:
        v2_tree = "; v2 tree at unified/ (cgroup.kill)" if (unified / "cgroup.procs").is_file() else ""
        return Check("cgroups", True, f"v1 controllers {', '.join(sorted(v1))}{v2_tree}")
    missing = ", ".join(sorted(wanted - v1 - v2_controllers))
    return Check(
        "cgroups", False, f"controllers missing: {missing} (limits fall back to rlimits)",
        "mount the cgroup controllers (systemd does this) or run in a container with --cgroupns=private",
    )


def check_model(name: str = "smollm2-135m", cache_dir: str | None = None, registry: dict | None = None) -> Check:
    from fireflash.models import EMBEDDED, ModelNotFound, cache_root, embedded_gguf_path

    registry = EMBEDDED if registry is None else registry
    if name not in registry:
        ok = (Path(name) / "config.json").is_file()
        return Check("model", ok, name, "" if ok else f"{name} has no config.json: pass an HF model directory")
    try:
        gguf = embedded_gguf_path(name, registry)
    except ModelNotFound as e:
        return Check("model", False, "GGUF not installed", str(e))
    cached = cache_root(cache_dir) / "models" / name / "config.json"
    state = "cached" if cached.is_file() else "not cached yet (first load ~40 s)"
    return Check("model", True, f"{name}: {gguf.name}, {state}")


def check_disk(path: Path = Path("."), min_free_gib: float = 5.0, usage: Callable = shutil.disk_usage) -> Check:
    free_gib = usage(path).free / 2**30
    if free_gib >= min_free_gib:
        return Check("disk", True, f"{free_gib:.1f} GiB free at {path.resolve()}")
    return Check(
        "disk", False, f"{free_gib:.1f} GiB free at {path.resolve()} (< {min_free_gib} GiB)",
        "free space or point tracking.run_dir / FIREFLASH_CACHE at a larger disk",
    )


def run_checks(model: str = "smollm2-135m") -> list[Check]:
    checks = [check_python(), check_torch(), check_bwrap(), check_user_namespaces(), check_cgroups()]
    try:
        from fireflash.sandbox import check_host
        from fireflash.sandbox.config import SandboxConfig
    except ImportError:
        pass
    else:
        checks += [Check(f"sandbox: {name}", ok, detail) for name, ok, detail in check_host(SandboxConfig())]
    return checks + [check_model(model), check_disk()]
