"""Sandbox configuration (RECIPE.md §1: every attempt and every grading run in its own sandbox)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["bwrap", "unsafe-local"] = Field(
        "bwrap",
        description="'bwrap' (bubblewrap + overlayfs + cgroups) or 'unsafe-local' (no isolation; debugging only).",
    )
    root_dir: str = Field(
        "/dev/shm/fireflash-sandboxes",
        description="Host directory for parents, overlay upper/work dirs; must not itself be on overlayfs.",
    )
    tmp_size_mb: int = Field(256, gt=0, description="Size cap of each sandbox's tmpfs /tmp, MiB.")
    output_size_mb: int = Field(
        128,
        gt=0,
        description="Size cap of the tmpfs holding command output files (/tmp/.fireflash), MiB; separate from /tmp. "
        "Old outputs are deleted when finished commands' outputs exceed half of it.",
    )
    preview_chars: int = Field(
        4000, gt=0, description="Head+tail characters of command output returned inline."
    )
    cgroup_pool_size: int = Field(
        8,
        ge=0,
        description="Cgroup slots kept for reuse; at most 2 are started up front (attach costs ~9 ms when created lazily).",
    )
    prefork: int = Field(
        2,
        ge=0,
        description="Children of each task parent started ahead of time, so fork() returns at once; 0 disables. "
        "Each holds a slot and three idle processes while it waits.",
    )
    start_timeout_sec: float = Field(
        10.0, gt=0, description="A sandbox that is not ready in this time is a failure."
    )
    ro_binds: dict[str, str] = Field(
        default_factory=dict,
        description="Extra read-only layers: sandbox path → host directory bound into every sandbox "
        "(e.g. {'/opt/venv': '/srv/venvs/py311'} for a prebuilt Python venv); readable by sandbox_uid.",
    )
    sandbox_uid: int = Field(
        1000,
        gt=0,
        description="Unprivileged host uid every sandboxed process runs as (never 0: root could read /etc/shadow).",
    )
    sandbox_gid: int = Field(1000, gt=0, description="Unprivileged host gid of sandboxed processes.")
    setup_timeout_sec: float = Field(
        600.0, gt=0, description="Limit of each setup command run once in a parent, seconds."
    )
    kill_grace_sec: float = Field(
        1.0,
        gt=0,
        description="After killing a timed-out command's tree, how long to wait for the shell before restarting it, seconds.",
    )
    cgroup_mode: Literal["auto", "v2", "v1", "none"] = Field(
        "auto", description="Resource limits through cgroup v2, v1, or none (rlimits only); 'auto' detects."
    )

    @field_validator("ro_binds")
    @classmethod
    def _absolute_binds(cls, v: dict[str, str]) -> dict[str, str]:
        for inside, host in v.items():
            if (
                not inside.startswith("/")
                or not host.startswith("/")
                or inside.rstrip("/") in ("", "/usr", "/etc", "/proc", "/dev", "/tmp")
            ):
                raise ValueError(
                    f"sandbox.ro_binds {inside!r} = {host!r}: both must be absolute, outside system dirs"
                )
        return v

    @field_validator("root_dir")
    @classmethod
    def _no_option_separators(cls, v: str) -> str:
        # overlayfs mount options are comma/colon separated: such characters would corrupt lowerdir=
        if any(c in v for c in ",:\\") or not v.startswith("/"):
            raise ValueError(f"sandbox.root_dir {v!r} must be an absolute path without ',', ':' or '\\\\'")
        return v
