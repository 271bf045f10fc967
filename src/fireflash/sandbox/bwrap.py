"""The default sandbox backend: bubblewrap + overlayfs + cgroups (RECIPE.md §1, issue 3).

What each sandbox gets
    - Files: a private overlayfs, ``upper`` (its writes, on its own ext4 filesystem of the task's ``storage_mb``,
      disks.py: a write past it fails with ENOSPC; a tmpfs of that size where the host has no loop devices)
      over read-only layers (skeleton, task files, fork snapshots). The host's ``/usr``, ``/etc`` (and
      ``/bin`` etc. when they are real dirs) are bound read-only; ``/tmp`` is its own size-capped tmpfs;
      ``/proc`` is its own; ``/dev`` is a minimal one; no ``/sys``. Nothing else of the host is visible.
      Command output goes to its own tmpfs (``/tmp/.fireflash``, ``output_size_mb``).
    - Identity: an unprivileged host uid/gid (``sandbox_uid``), no supplementary groups, no
      capabilities, ``no_new_privs``, inside its own user namespace; nested user namespaces disabled.
      The host's own reads and writes inside a sandbox (``read_file``/``write_file``) run on a thread
      whose file-access identity is ``sandbox_uid``, so planted symlinks gain nothing.
    - Namespaces: own mount, pid, ipc, uts, cgroup and network namespace (a fresh one per sandbox with
      only loopback: no network), unless the task sets ``allow_internet`` and the user opted in with
      ``sandbox.allow_internet`` (issue 26: a task's wish alone is only recorded); a ``fork(offline=True)``
      (the verifier's) is offline either way.
    - Limits: memory, pids and CPU quota from the task (cgroup v2 or v1; rlimits when neither is
      available), ``--die-with-parent``. A sandbox whose processes fill its pids limit, so that no new
      shell can start, has them all killed (its pid 1 excepted) and the command's result says so.
    - Lifetime: the sandbox's pid 1 is a small keeper that only reaps; killing it from the host kills
      every process of the sandbox, and its mount namespace (overlay, disk, tmpfs) vanishes with them (a
      disk's unmount finishes on a backend thread, ``drop_disk``; ``BwrapBackend.close`` waits for it).

A task with an image (``TaskEnvironment.image``, set by tasks/environments.py per ``sandbox.task_images``)
    - Files: the same overlay, over the image's files instead of the host's: its exported rootfs
      (rootfs.py), owned on the host from ``image_uid_base`` up, is the read-only lowest layer. No host
      directory is visible (``ro_binds`` excepted); ``/proc``, ``/dev``, ``/tmp`` and the output tmpfs as above.
      The verifier's staged tools (``TaskEnvironment.verifier_tools``) appear read-only at
      ``/.fireflash-verifier``: the launcher binds them as root before dropping privileges (the host directory
      need not be reachable by the image's ids), resolving the mount point with no symlink allowed; the
      kernel locks the bind read-only for every namespace made after it.
    - Identity: the task's user (``TaskEnvironment.user``, default root; the verifier's for grading forks),
      inside two user namespaces the launcher makes (``linux.userns_pair``): the image's ids 0..65535 map
      onto host ids ``image_uid_base + id``, so root inside is host uid ``image_uid_base``, never host root,
      and no host id below the base is mapped. Root holds a container's default capabilities
      (identity.ROOT_CAPS: no CAP_SYS_ADMIN, CAP_NET_RAW, CAP_MKNOD) in the inner namespace, which owns
      none of the sandbox's namespaces: it can write ``/usr`` and ``/etc`` (into its overlay), chown,
      install packages and drop to other users, but not mount, change the hostname, or create user
      namespaces (outer's ``max_user_namespaces`` is spent); ``no_new_privs`` as above. Host file access
      (``read_file``/``write_file``) runs as the sandbox user's host uid.
    - Namespaces, limits and lifetime: exactly as above.

What it does not guarantee
    - The kernel is shared: a kernel exploit escapes (use a microVM backend against hostile code).
    - /tmp and the output tmpfs count against the sandbox's memory limit, as does the writable layer where
      ``Disks.note`` says it is a tmpfs (no loop devices, or ``sandbox.storage = 'tmpfs'``).
    - Without cgroups (mode 'none') the pids limit counts every process of ``sandbox_uid`` host-wide (one
      sandbox filling it can make another kill its own processes to start a shell) and there is no CPU cap.
    - Image-backed sandboxes share host ids: every sandbox of an image user has the same host uid, as every
      host-userland sandbox has ``sandbox_uid``; they cannot see each other (own pid namespaces, no shared
      files), but a file one leaves in a shared ``ro_binds`` directory would be the others' too.

How it works
    ``prepare`` builds the task layer once and starts the parent. A sandbox takes a slot (a cgroup
    plus a launcher process living in it, see slots.py / launcher.py) and starts as: the launcher
    forks → the child unshares a mount namespace, mounts the sandbox's disk (or tmpfs) and the overlay, drops to
    ``sandbox_uid`` → exec ``bwrap`` (unprivileged, own user namespace) binding the overlay as ``/``
    → keeper (pid 1) → the persistent shell, which starts in the task's workdir (in ``/`` when the agent
    deleted it: a fork of that final state must still start, for grading). Further shells (restarts,
    background jobs) join the sandbox's namespaces with ``setns``. A task parent keeps ``prefork``
    children started ahead. For an image, the launcher's child first makes the sandbox's two user
    namespaces and drops to the image user's host uid, and bwrap enters them (``--userns``/``--userns2``)
    instead of creating one; joining shells enter them too and keep root's bounding set only.

    A backend and its sandboxes belong to the event loop they were created in (pipes are read there).
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from fireflash.protocols import VERIFIER_TOOLS_DIR, TaskEnvironment, cache_root
from fireflash.sandbox import linux, procs
from fireflash.sandbox.bwrap_sandbox import BwrapSandbox
from fireflash.sandbox.cgroups import CgroupTree, detect_mode, remove_stale
from fireflash.sandbox.config import SandboxConfig
from fireflash.sandbox.containers import ContainerTool, find_tool
from fireflash.sandbox.disks import Disks
from fireflash.sandbox.disks import remove_stale as remove_stale_disks
from fireflash.sandbox.errors import SandboxError, SandboxUnavailable
from fireflash.sandbox.identity import HOME, USER, Identity, host_identity, image_identity
from fireflash.sandbox.layers import Layer, build_image_skeleton, build_skeleton, build_task_layer
from fireflash.sandbox.rootfs import hold_rootfs, host_ids_in_range
from fireflash.sandbox.rootfs_cache import RootfsHold
from fireflash.sandbox.slots import SlotPool

T = TypeVar("T")


class BwrapBackend:
    """Builds task parents and tracks every sandbox; see the module docstring for the isolation model.

    Args:
        cfg: the ``[sandbox]`` config section.

    Raises:
        SandboxUnavailable: bwrap missing, not root, no openat2, or cgroups requested but unusable;
            the message says how to fix it.
    """

    def __init__(self, cfg: SandboxConfig) -> None:
        if shutil.which("bwrap") is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed: apt-get install -y bubblewrap (or use sandbox.backend='unsafe-local' to debug without isolation)"
            )
        if os.geteuid() != 0:
            raise SandboxUnavailable(
                "the bwrap backend mounts overlayfs and must run as root (as in CI); run as root or use sandbox.backend='unsafe-local'"
            )
        if not linux.openat2_available():
            raise SandboxUnavailable(
                "the kernel lacks openat2 (Linux >= 5.6 needed) for safe file access inside sandboxes"
            )
        self.cfg = cfg
        root = Path(cfg.root_dir)
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        _remove_stale(root)
        remove_stale_disks(cfg.disk_dir, procs.alive)
        self.disks = Disks(cfg)
        self.dir = root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir(mode=0o755)
        (self.dir / "boxes").mkdir(mode=0o755)
        (self.dir / "layers").mkdir(mode=0o700)
        self.skeleton = Layer(self.dir / "layers" / "skeleton", refs=1)
        for inside, host in cfg.ro_binds.items():
            if not _readable_by(host, cfg.sandbox_uid, cfg.sandbox_gid):
                shutil.rmtree(self.dir, ignore_errors=True)
                raise SandboxUnavailable(
                    f"sandbox.ro_binds[{inside!r}] = {host!r} is not a directory the sandbox uid {cfg.sandbox_uid} "
                    "can read (bwrap binds it as that user): create it, and chmod o+rx it and its parents"
                )
        build_skeleton(self.skeleton.path, cfg.sandbox_uid, cfg.sandbox_gid, HOME, list(cfg.ro_binds))
        self._write_identity_files()
        mode = detect_mode() if cfg.cgroup_mode == "auto" else cfg.cgroup_mode
        self.cgroup_mode = mode
        tree = None
        if mode != "none":
            remove_stale(procs.alive)
            try:
                tree = CgroupTree(mode, f"fireflash-{self.dir.name}")
            except OSError as e:
                shutil.rmtree(self.dir, ignore_errors=True)
                raise SandboxUnavailable(
                    f"cgroup {mode} unusable ({e}); set sandbox.cgroup_mode='none' to fall back to rlimits"
                ) from None
        self.has_cgroups = tree is not None
        self.pool = SlotPool(tree, cfg.cgroup_pool_size)
        self.bwrap = shutil.which("bwrap")
        # every file access of the host inside a sandbox runs with the sandbox user's permissions, so a
        # symlink to /etc/shadow planted by the agent reads as "permission denied", as it would inside
        self.host_identity = host_identity(cfg.sandbox_uid, cfg.sandbox_gid)
        self._io: dict[tuple[int, int], ThreadPoolExecutor] = {}
        # closing a disk-backed sandbox's last hold on its mount namespace unmounts its ext4 and detaches the
        # loop device: ~5 ms of kernel work (more under load) that close() hands to this thread
        self._unmounts = ThreadPoolExecutor(1, "ff-sandbox-unmount")
        self._tool: ContainerTool | None = None
        self._rootfs: dict[str, tuple[Layer, Layer | None]] = {}  # image → (its rootfs, its mount points)
        self._rootfs_locks: dict[str, asyncio.Lock] = {}
        self._rootfs_holds: list[RootfsHold] = []  # keep this backend's exports from eviction until close
        self.sandboxes: set[BwrapSandbox] = set()
        self.tasks: set[asyncio.Task] = set()  # background starts of pre-forked children
        self._parents: dict[str, BwrapSandbox] = {}
        self._prepare_locks: dict[str, asyncio.Lock] = {}
        self._ids = 0

    async def run_io(self, identity: Identity, fn: Callable[..., T], *args: Any) -> T:
        """Run a file function on a thread whose file-access identity is ``identity``'s host uid and gid."""
        key = (identity.host_uid, identity.host_gid)
        pool = self._io.get(key)
        if pool is None:
            pool = self._io[key] = ThreadPoolExecutor(
                2, f"ff-sandbox-io-{key[0]}", initializer=linux.drop_fs_identity, initargs=key
            )
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    def _write_identity_files(self) -> None:
        # the sandbox uid gets a name and home in /etc/passwd (replacing a host user with that uid)
        uid, gid = self.cfg.sandbox_uid, self.cfg.sandbox_gid
        passwd = [l for l in Path("/etc/passwd").read_text().splitlines() if l.split(":")[2:3] != [str(uid)]]
        passwd.append(f"{USER}:x:{uid}:{gid}:FireFlash sandbox:{HOME}:/bin/bash")
        group = [l for l in Path("/etc/group").read_text().splitlines() if l.split(":")[2:3] != [str(gid)]]
        group.append(f"{USER}:x:{gid}:")
        (self.dir / "passwd").write_text("\n".join(passwd) + "\n")
        (self.dir / "group").write_text("\n".join(group) + "\n")
        for name in ("passwd", "group"):
            os.chmod(self.dir / name, 0o644)

    def drop_disk(self, mnt_ns: int, disk_root: int, box: str) -> None:
        """Unmount a closed sandbox's disk on a background thread (``close`` waits for them all).

        ``mnt_ns`` (an fd of the sandbox's mount namespace) keeps the disk mounted; ``disk_root`` (an fd of its
        root) lets the thread shut the filesystem down first, so that its dirty pages are dropped, not written to
        an image that is about to be freed; ``box`` is its mount point.
        Removing ``box`` now would unmount the disk in that namespace synchronously (rmdir detaches mounts
        of every namespace: ~5 ms, 25+ under load), so it is renamed aside (a rename does not) and removed
        after the namespace's last fd is closed.
        """
        aside = f"{box}.closed"
        try:
            os.rename(box, aside)
        except OSError:
            aside = box
        self._unmounts.submit(_drop_disk, mnt_ns, disk_root, aside)

    def new_id(self) -> str:
        self._ids += 1
        return str(self._ids)

    async def prepare(self, env: TaskEnvironment, name: str) -> BwrapSandbox:
        """Build (or reuse) the parent for ``name``: task files at ``env.workdir``, setup run once, offline.

        Raises:
            SandboxError: bad ``files_dir``, a Dockerfile environment, a failing setup command, or
                ``name`` already prepared with a different environment.
        """
        if env.dockerfile is not None:
            raise SandboxError(
                f"parent {name!r}: a Dockerfile the host's userland cannot run needs the task's image; load the task "
                "with the sandbox config (tasks.loader.load_tasks(..., sandbox=cfg.sandbox), sandbox.task_images "
                "'auto' or 'always', podman installed: make setup)"
            )
        if env.image is not None:
            return await self._prepare_image(env, name)
        if env.user is not None or env.verifier_user is not None:
            field = "[agent].user" if env.user is not None else "[verifier].user"
            raise SandboxError(
                f"parent {name!r}: the task sets {field} = {env.user or env.verifier_user!r}, which only a sandbox "
                f"forked from the task's image honours (the host's userland runs everything as uid "
                f"{self.cfg.sandbox_uid}); set sandbox.task_images = 'auto' or 'always' with podman installed"
            )
        if not env.workdir.startswith("/") or env.workdir.rstrip("/") in (
            "",
            "/usr",
            "/etc",
            "/proc",
            "/dev",
            "/tmp",
        ):
            raise SandboxError(
                f"parent {name!r}: TaskEnvironment.workdir {env.workdir!r} must be an absolute path outside system dirs, e.g. /app"
            )
        lock = self._prepare_locks.setdefault(name, asyncio.Lock())
        async with lock:
            parent = self._parents.get(name)
            if parent is not None and not parent.closed:
                if parent.env != env:
                    raise SandboxError(
                        f"parent {name!r} is already prepared with a different environment; use a new name"
                    )
                return parent
            layer = Layer(self.dir / "layers" / f"task-{self.new_id()}")
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(
                    None,
                    build_task_layer,
                    layer.path,
                    env.workdir,
                    env.files_dir,
                    self.cfg.sandbox_uid,
                    self.cfg.sandbox_gid,
                )
            except BaseException:
                shutil.rmtree(layer.path, ignore_errors=True)
                raise
            parent = await BwrapSandbox.start(self, env, [layer, self.skeleton], self.host_identity)
            return await self._set_up(parent, env, name)

    async def _set_up(self, parent: BwrapSandbox, env: TaskEnvironment, name: str) -> BwrapSandbox:
        for command in env.setup_commands:
            result = await parent.exec(command, timeout_sec=self.cfg.setup_timeout_sec)
            if result.exit_code != 0:
                await parent.close()
                why = "timed out" if result.timed_out else f"exited {result.exit_code}"
                raise SandboxError(f"parent {name!r}: setup command {command!r} {why}:\n{result.preview[-2000:]}")
        self._parents[name] = parent
        return parent

    async def _prepare_image(self, env: TaskEnvironment, name: str) -> BwrapSandbox:
        """A parent whose lowest layer is ``env.image``'s rootfs (exported on first use), run as ``env.user``."""
        if not env.workdir.startswith("/"):
            raise SandboxError(f"parent {name!r}: TaskEnvironment.workdir {env.workdir!r} must be an absolute path")
        lock = self._prepare_locks.setdefault(name, asyncio.Lock())
        async with lock:
            parent = self._parents.get(name)
            if parent is not None and not parent.closed:
                if parent.env != env:
                    raise SandboxError(
                        f"parent {name!r} is already prepared with a different environment; use a new name"
                    )
                return parent
            rootfs, skeleton = await self._image_layers(env.image, name)
            try:
                identity = image_identity(rootfs.path, env.user, self.cfg.image_uid_base)
                if env.verifier_user is not None:
                    image_identity(rootfs.path, env.verifier_user, self.cfg.image_uid_base)  # fails here, not at grading
            except SandboxError as e:
                raise SandboxError(f"parent {name!r} (image {env.image}): {e}") from None
            lowers = [layer for layer in (skeleton, rootfs) if layer is not None]
            if env.files_dir is not None:
                layer = Layer(self.dir / "layers" / f"task-{self.new_id()}")
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        None, build_task_layer, layer.path, env.workdir, env.files_dir, identity.host_uid,
                        identity.host_gid, rootfs.path,
                    )
                except BaseException:
                    shutil.rmtree(layer.path, ignore_errors=True)
                    raise
                lowers.insert(0, layer)
            parent = await BwrapSandbox.start(self, env, lowers, identity)
            return await self._set_up(parent, env, name)

    async def _image_layers(self, image: str, name: str) -> tuple[Layer, Layer | None]:
        """The rootfs layer of ``image`` and the layer of mount points it lacks (None: it has them all)."""
        lock = self._rootfs_locks.setdefault(image, asyncio.Lock())
        async with lock:
            if image in self._rootfs:
                return self._rootfs[image]
            loop = asyncio.get_running_loop()
            clashes = host_ids_in_range(self.cfg.image_uid_base)
            if clashes:
                raise SandboxUnavailable(
                    f"parent {name!r}: image sandboxes use host ids {self.cfg.image_uid_base}..+65535 "
                    f"(sandbox.image_uid_base), which {', '.join(clashes)} already use; set sandbox.image_uid_base "
                    "to a free range"
                )
            try:
                if self._tool is None:
                    self._tool = find_tool(self.cfg.image_builder)
                cache = Path(self.cfg.image_rootfs_dir or Path(cache_root()) / "images" / "rootfs")
                cap_bytes = int(self.cfg.rootfs_cache_gb * 1e9)
                hold = await loop.run_in_executor(
                    None, hold_rootfs, self._tool, image, cache, self.cfg.image_uid_base, cap_bytes
                )
                self._rootfs_holds.append(hold)
                path = hold.path
            except SandboxError as e:  # the tool missing, the image unknown, an export failing
                kind = SandboxUnavailable if isinstance(e, SandboxUnavailable) else SandboxError
                raise kind(f"parent {name!r}: image {image}: {e}") from None
            if any(c in str(path) for c in ",:\\"):
                raise SandboxError(
                    f"parent {name!r}: the rootfs of image {image} is at {path}, whose ',', ':' or '\\' an overlay "
                    "mount cannot take; set sandbox.image_rootfs_dir to a plain path"
                )
            if not _has_file(path, "/bin/bash"):
                raise SandboxError(
                    f"parent {name!r}: image {image} has no /bin/bash, which runs every sandbox's shell; "
                    "install bash in its Dockerfile"
                )
            base = self.cfg.image_uid_base
            skeleton = Layer(self.dir / "layers" / f"mounts-{self.new_id()}", refs=1)
            has = await loop.run_in_executor(
                None, build_image_skeleton, skeleton.path, path, [*self.cfg.ro_binds, VERIFIER_TOOLS_DIR], base, base
            )
            self._rootfs[image] = (Layer(path, refs=1, owned=False), skeleton if has else None)
            return self._rootfs[image]

    def identity(self, env: TaskEnvironment, user: str) -> Identity:
        """The identity of ``user`` for a sandbox of ``env`` (a grading fork's verifier user).

        Raises:
            SandboxError: the host's userland has one user only; an unknown image user.
        """
        if env.image is None:
            raise SandboxError(
                f"fork(user={user!r}): users are honoured only in sandboxes forked from the task's image "
                f"(the host's userland runs everything as uid {self.cfg.sandbox_uid}); set sandbox.task_images"
            )
        rootfs, _ = self._rootfs[env.image]
        return image_identity(rootfs.path, user, self.cfg.image_uid_base)

    def lowerdir(self, lowers: list[Layer]) -> str:
        text = ":".join(str(layer.path) for layer in lowers)
        if len(text) > 3800:  # mount options must fit one page
            raise SandboxError(
                f"too many stacked layers ({len(lowers)}): fork a fresh parent instead of forks of forks"
            )
        return text

    def acquire(self, lowers: list[Layer]) -> None:
        for layer in lowers:
            layer.refs += 1

    def release(self, lowers: list[Layer]) -> None:
        for layer in lowers:
            layer.refs -= 1
            if layer.refs <= 0 and layer.owned and layer is not self.skeleton:
                shutil.rmtree(layer.path, ignore_errors=True)

    async def close(self) -> None:
        """Close every parent and sandbox this backend made; remove its directories and cgroups."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for sandbox in sorted(self.sandboxes, key=lambda s: -s.depth):
            await sandbox.close()
        self._parents.clear()
        self.pool.close()
        self._unmounts.shutdown(wait=True)
        for pool in self._io.values():
            pool.shutdown(wait=True)
        self._io.clear()
        for hold in self._rootfs_holds:
            hold.release()
        self._rootfs_holds.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def rlimits(self, env: TaskEnvironment) -> list:
        """rlimits used only when there are no cgroups (see module docstring)."""
        if self.has_cgroups:
            return []
        return [(resource.RLIMIT_AS, env.memory_mb * 1024 * 1024), (resource.RLIMIT_NPROC, env.pids_max)]


def _drop_disk(mnt_ns: int, disk_root: int, box: str) -> None:
    try:
        linux.discard_disk(disk_root)
    except OSError:
        pass  # not shut down: the unmount writes its pages to the image first (slower, same result)
    os.close(disk_root)
    os.close(mnt_ns)  # the namespace's last hold: its disk is unmounted and its loop device detached here
    try:
        os.rmdir(box)
    except OSError:
        shutil.rmtree(box, ignore_errors=True)


def _readable_by(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid`` can list ``path`` (checked on a thread with that file-access identity)."""

    def probe() -> bool:
        linux.drop_fs_identity(uid, gid)
        try:
            os.listdir(path)
        except OSError:
            return False
        return True

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(probe).result()


def _has_file(rootfs: Path, inner: str) -> bool:
    """Whether ``inner`` exists in ``rootfs``, its symlinks resolved inside it (an absolute link stays there)."""
    root = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.close(linux.open_in_root(root, inner, os.O_PATH))
        return True
    except OSError:
        return False
    finally:
        os.close(root)


def _remove_stale(root: Path) -> None:
    """Delete directories of backends whose process died without closing (mounts died with it)."""
    for child in root.iterdir():
        pid = child.name.split("-", 1)[0]
        if pid.isdigit() and not procs.alive(int(pid)):
            shutil.rmtree(child, ignore_errors=True)
