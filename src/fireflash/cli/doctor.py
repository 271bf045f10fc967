"""`fireflash doctor`: is this host ready to run FireFlash? Each failing check names its fix.

Sandbox readiness (bubblewrap usable, user namespaces, overlayfs, cgroup controllers) comes from the
configured backend itself (``fireflash.sandbox.host``), so doctor and the backend never disagree.

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

from fireflash.sandbox import check_host
from fireflash.sandbox.config import SandboxConfig


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


def sandbox_checks(cfg: SandboxConfig) -> list[Check]:
    """The sandbox backend's own readiness checks (``fireflash.sandbox.check_host``); a failure's detail is its fix."""
    return [
        Check(f"sandbox: {name}", ok, detail if ok else "", "" if ok else detail) for name, ok, detail in check_host(cfg)
    ]


def run_checks(model: str = "smollm2-135m", sandbox: SandboxConfig | None = None) -> list[Check]:
    checks = [check_python(), check_torch(), *sandbox_checks(sandbox or SandboxConfig())]
    return checks + [check_model(model), check_disk()]
