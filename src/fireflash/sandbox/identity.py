"""Who a sandbox's processes are: the host's sandbox uid, or a user of the task's image.

    host_identity(1000, 1000)                              # host userland: uid 1000, inside and outside
    image_identity(rootfs, "root", uid_base=1_000_000_000)  # image: uid 0 inside = host uid 1,000,000,000
    image_identity(rootfs, "agent:staff", uid_base)         # a name (the image's /etc/passwd and /etc/group)
    image_identity(rootfs, "1000:1000", uid_base)           # or numbers, as docker's USER and --user take

An image-backed sandbox maps the image's ids 0..65535 onto host ids ``uid_base + id`` (rootfs.py), so its
user's host uid is ``uid_base + uid``; never host root, never a host user below ``uid_base``. Root inside
holds the capabilities a container's root holds by default (``ROOT_CAPS``, no CAP_SYS_ADMIN, no
CAP_NET_RAW, no CAP_MKNOD), in a user namespace that owns none of the sandbox's other namespaces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fireflash.sandbox import linux
from fireflash.sandbox.errors import SandboxError
from fireflash.sandbox.rootfs import IMAGE_IDS

HOME = "/home/agent"
USER = "agent"

ROOT_CAPS = {
    "CAP_CHOWN": 0,
    "CAP_DAC_OVERRIDE": 1,
    "CAP_FOWNER": 3,
    "CAP_FSETID": 4,
    "CAP_KILL": 5,
    "CAP_SETGID": 6,
    "CAP_SETUID": 7,
    "CAP_SETPCAP": 8,
    "CAP_NET_BIND_SERVICE": 10,
    "CAP_SYS_CHROOT": 18,
    "CAP_AUDIT_WRITE": 29,
    "CAP_SETFCAP": 31,
}
"""Capabilities of root inside an image-backed sandbox (number by name): docker's default set less
CAP_NET_RAW and CAP_MKNOD. Enough for apt, dpkg, useradd, chown and dropping to another user."""


@dataclass(frozen=True)
class Identity:
    """A sandbox's user: ids inside, ids on the host, and what its shell is told (HOME, USER)."""

    uid: int
    gid: int
    name: str
    home: str
    host_uid: int
    host_gid: int
    image: bool  # True: one of an image's users (many ids mapped; the launcher makes the user namespaces)

    @property
    def caps(self) -> dict[str, int]:
        """Capabilities its processes keep (root of an image only)."""
        return ROOT_CAPS if self.image and self.uid == 0 else {}


def host_identity(uid: int, gid: int) -> Identity:
    """The host-userland sandbox user: ``sandbox_uid`` inside and outside, named ``agent``."""
    return Identity(uid, gid, USER, HOME, uid, gid, image=False)


def _entries(rootfs_fd: int, path: str) -> list[list[str]]:
    """The colon-separated lines of ``path`` inside the rootfs (symlinks resolved inside it, never to the host)."""
    try:
        fd = linux.open_in_root(rootfs_fd, path, os.O_RDONLY)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        text = f.read(4 << 20).decode("utf-8", "replace")
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def image_identity(rootfs: Path, spec: str | None, uid_base: int) -> Identity:
    """The image user ``spec`` names: ``user``, ``uid``, ``user:group`` or ``uid:gid``; None or '' is root.

    A name must be in the image's ``/etc/passwd`` (a group name in its ``/etc/group``); a number need not be,
    as with docker: its home is then ``/`` and, without a group, its gid 0.

    Raises:
        SandboxError: an unknown name, or an id outside 0..65535; the message says what to change.
    """
    spec = (spec or "root").strip()
    user, _, group = spec.partition(":")
    fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        passwd = [e for e in _entries(fd, "/etc/passwd") if len(e) >= 7]
        groups = [e for e in _entries(fd, "/etc/group") if len(e) >= 3]
    finally:
        os.close(fd)
    entry = next((e for e in passwd if (e[2] == user if user.isdigit() else e[0] == user)), None)
    if entry is None and not user.isdigit():
        raise SandboxError(
            f"user {user!r} is not in the image's /etc/passwd; name a user the image has (its Dockerfile's "
            "useradd), or give a numeric uid"
        )
    uid = int(user) if user.isdigit() else int(entry[2])
    gid = int(entry[3]) if entry is not None and entry[3].isdigit() else 0
    if group:
        found = next((g for g in groups if g[0] == group), None)
        if not group.isdigit() and found is None:
            raise SandboxError(f"group {group!r} (user {spec!r}) is not in the image's /etc/group; name one it has")
        gid = int(group) if group.isdigit() else int(found[2])
    if uid >= IMAGE_IDS or gid >= IMAGE_IDS:
        raise SandboxError(f"user {spec!r} is {uid}:{gid}; an image-backed sandbox maps only ids 0..{IMAGE_IDS - 1}")
    name = entry[0] if entry is not None else str(uid)
    home = entry[5] if entry is not None and entry[5].startswith("/") else "/"
    return Identity(uid, gid, name, home, uid_base + uid, uid_base + gid, image=True)
