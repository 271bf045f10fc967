"""Sandbox configuration (RECIPE.md §1: every attempt and every grading run in its own sandbox)."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TRIXIE, BOOKWORM = "localhost/fireflash/debian:trixie", "localhost/fireflash/debian:bookworm"
PYTHON_313, PYTHON_311 = "localhost/fireflash/python:3.13", "localhost/fireflash/python:3.11"
DEFAULT_BASE_IMAGES: dict[str, str] = {
    **{f"ubuntu:{t}": TRIXIE for t in ("24.04", "noble", "latest", "rolling", "25.04", "25.10")},
    **{f"ubuntu:{t}": BOOKWORM for t in ("22.04", "jammy", "20.04", "focal")},
    **{f"debian:{t}{s}": BOOKWORM for t in ("bookworm", "12") for s in ("", "-slim")},
    **{f"debian:{t}{s}": BOOKWORM for t in ("12.0", "12.1", "12.2", "12.4", "12.5", "12.6", "12.7", "12.8", "12.9",
                                             "12.10", "12.11") for s in ("", "-slim")},
    # point releases too: Terminal-Bench 2's build-pmars is FROM debian:13.0-slim
    **{f"debian:{t}{s}": TRIXIE for t in ("trixie", "13", "stable", "13.0", "13.1", "13.2") for s in ("", "-slim")},
    "debian:latest": TRIXIE,
    **{f"python:3.{v}{s}": PYTHON_313 for v in (12, 13) for s in ("", "-slim", "-slim-trixie", "-trixie",
                                                                   "-slim-bookworm", "-bookworm")},
    **{f"python:3.11{s}": PYTHON_311 for s in ("", "-slim", "-slim-bookworm", "-bookworm")},
}
"""Images no registry may serve → local bases that ``fireflash images bases`` builds (Debian's archive only).
Ubuntu 24.04 → Debian trixie and 22.04 → bookworm are the nearest glibc and Python; Python 3.12 → 3.13 (Debian
has no 3.12). Every use is printed and recorded, never silent (tasks/images.py)."""


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
    storage: Literal["auto", "disk", "tmpfs"] = Field(
        "auto",
        description="Where each sandbox's writes (its overlay upper dir) live, capped at the task's storage_mb: "
        "'disk' its own ext4 filesystem on a loop device (a disk quota: a write past it fails with ENOSPC and costs "
        "no memory; sandbox/disks.py); 'tmpfs' a tmpfs, whose pages count against memory_mb; 'auto' disk when the "
        "host allows (root, loop devices, mkfs.ext4), else tmpfs with a logged warning.",
    )
    disk_dir: str = Field(
        "/var/tmp/fireflash-disks",
        description="Directory on a disk filesystem (not tmpfs) for the empty ext4 images sandboxes copy (~200 KB "
        "each, one per storage_mb) and, briefly, their copies (unlinked once attached: blocks freed at close).",
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
    allow_internet: bool = Field(
        False,
        description="Let the agent phase of a task that declares allow_internet = true reach the host's network "
        "(issue 26, network by phase). Off: every sandbox is offline and a task's allow_internet is only recorded. "
        "Grading forks are offline either way (the verifier's tools are staged at build time).",
    )
    image_builder: Literal["auto", "podman", "buildah", "docker"] = Field(
        "auto",
        description="Tool that builds and stores task images: 'auto' takes podman, else buildah, else docker "
        "when its daemon answers.",
    )
    base_images: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_BASE_IMAGES),
        description="FROM image that cannot be pulled → local image used instead (printed and recorded). "
        "Entries given are added to the built-in map (sandbox/config.py DEFAULT_BASE_IMAGES); map a name to "
        "'' to drop a built-in entry. Names are matched without 'docker.io/library/' and with ':latest' added.",
    )
    image_pull_timeout_sec: float = Field(
        60.0, ge=0, description="Limit of one pull of a task's base or docker_image, seconds; 0 never pulls."
    )
    image_build_timeout_sec: float = Field(
        1800.0, gt=0, description="Limit of one image build when task.toml sets no build_timeout_sec, seconds."
    )
    task_images: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Which tasks run in their own image (its files under the sandbox's overlay, root inside a user "
        "namespace) instead of the host's userland: 'auto' those the host's userland cannot run (a Dockerfile "
        "step it cannot materialise, or an [agent]/[verifier] user), when a container tool is installed; 'always' "
        "every task with a Dockerfile or docker_image (builds each once); 'never' none, as before images existed.",
    )
    image_uid_base: int = Field(
        1_000_000_000,
        ge=65536,
        le=2**32 - 2 - 65536,
        description="First host uid/gid of the 65,536 that an image's ids 0..65535 become (root inside = this uid on "
        "the host, never host root); pick a range no host user or /etc/subuid entry uses.",
    )
    image_rootfs_dir: str | None = Field(
        None,
        description="Where image root filesystems are exported, one directory per image (about the image's size); "
        "None: $FIREFLASH_CACHE/images/rootfs (default ~/.cache/fireflash/images/rootfs). Not on tmpfs: they stay.",
    )
    rootfs_cache_gb: float = Field(
        40.0,
        ge=0,
        description="Disk cap of image_rootfs_dir in GB (10^9 bytes; hard-linked files counted once): after each new "
        "export the least recently used exports no running backend holds are removed until it fits; 0 = no cap. "
        "40 holds ~100 distinct 350 MB bases plus thousands of deduplicated task images on one base, a sixth of a "
        "250 GB disk.",
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

    @field_validator("base_images", mode="before")
    @classmethod
    def _onto_defaults(cls, v: Any) -> Any:
        # the user's entries extend the built-in map rather than replace it: one new entry must not
        # silently drop every default substitution
        return {**DEFAULT_BASE_IMAGES, **v} if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _uid_ranges_apart(self) -> "SandboxConfig":
        for name in ("sandbox_uid", "sandbox_gid"):
            if self.image_uid_base <= getattr(self, name) < self.image_uid_base + 65536:
                raise ValueError(
                    f"sandbox.{name} = {getattr(self, name)} lies in the image id range sandbox.image_uid_base = "
                    f"{self.image_uid_base} .. +65535; move one of them"
                )
        return self

    @field_validator("root_dir", "disk_dir")
    @classmethod
    def _no_option_separators(cls, v: str) -> str:
        # overlayfs mount options are comma/colon separated: such characters would corrupt lowerdir=
        if any(c in v for c in ",:\\") or not v.startswith("/"):
            raise ValueError(f"sandbox.root_dir / disk_dir {v!r} must be an absolute path without ',', ':' or '\\\\'")
        return v
