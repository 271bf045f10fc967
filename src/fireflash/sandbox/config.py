"""Sandbox configuration (RECIPE.md §1: every attempt and every grading run in its own sandbox)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["bwrap", "unsafe-local"] = Field(
        "bwrap", description="'bwrap' (bubblewrap + overlayfs + cgroups) or 'unsafe-local' (no isolation; debugging only)."
    )
    root_dir: str = Field(
        "/dev/shm/fireflash-sandboxes",
        description="Host directory for parents, overlay upper/work dirs; must not itself be on overlayfs.",
    )
    tmp_size_mb: int = Field(256, gt=0, description="Size cap of each sandbox's tmpfs /tmp, MiB.")
    preview_chars: int = Field(4000, gt=0, description="Head+tail characters of command output returned inline.")
    cgroup_pool_size: int = Field(8, ge=0, description="Pre-created cgroups (attach costs ~9 ms when created lazily).")
    start_timeout_sec: float = Field(10.0, gt=0, description="A sandbox that is not ready in this time is a failure.")
