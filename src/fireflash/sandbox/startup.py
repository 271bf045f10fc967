"""How a bwrap sandbox's processes start: bwrap's command line, their environment, the namespaces a new shell joins.

The isolation these give is described in bwrap.py, which owns the backend; bwrap_sandbox.py starts them.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fireflash.protocols import TaskEnvironment
from fireflash.sandbox.identity import HOME, USER, Identity
from fireflash.sandbox.launcher import CTL_FD, INFO_FD, USERNS_FDS
from fireflash.sandbox.shell import KEEPER, OUTPUT_DIR

if TYPE_CHECKING:
    from fireflash.sandbox.bwrap import BwrapBackend

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NAMESPACES = ("mnt", "pid", "ipc", "uts", "cgroup")  # joined after the user namespace that owns them
_NS_GET_USERNS = 0xB701  # ioctl: the user namespace owning a namespace


def sandbox_env(env: TaskEnvironment, identity: Identity | None = None) -> dict[str, str]:
    """Environment variables of every command: a minimal login environment for the sandbox's user plus the
    task's ``env`` (for an image, its ``ENV`` lines: tasks/images.py puts them there)."""
    home, user = (identity.home, identity.name) if identity is not None else (HOME, USER)
    base = {
        "PATH": PATH,
        "HOME": home,
        "USER": user,
        "LOGNAME": user,
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }
    return base | dict(env.env)


def namespace_fds(pid: int) -> list[int]:
    """fds of the namespaces of ``pid`` in the order a process must join them: net, then users' ones.

    The network namespace belongs to the host's user namespace (the launcher made it), so it is joined
    first, as root. bwrap nests a second user namespace inside the one owning the other namespaces:
    join the owner, then the namespaces, then the inner user namespace.
    """
    fds: list[int] = [os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)]
    try:
        inner = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        fds.append(inner)
        for ns in _NAMESPACES:
            fds.append(os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC))
        owner = fcntl.ioctl(fds[2], _NS_GET_USERNS)
        fds.append(owner)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    net, namespaces = fds[0], fds[2:-1]
    if os.fstat(owner).st_ino == os.fstat(inner).st_ino:
        os.close(inner)
        return [net, owner, *namespaces]
    return [net, owner, *namespaces, inner]


def bwrap_argv(backend: BwrapBackend, env: TaskEnvironment, me: Identity, box: str) -> list[str]:
    """bwrap's command line for a sandbox of ``env`` run as ``me`` over the overlay mounted at ``box``/merged:
    its namespaces, the binds of the host's userland (or none, for an image), tmpfses, environment, then the keeper."""
    cfg = backend.cfg
    argv = [backend.bwrap]
    if me.image:  # user namespaces made by the launcher (USERNS_FDS): many ids mapped, nesting used up
        argv += ["--userns", str(USERNS_FDS[0]), "--userns2", str(USERNS_FDS[1]), "--assert-userns-disabled"]
        for cap in me.caps:
            argv += ["--cap-add", cap]
    else:
        argv += ["--unshare-user", "--disable-userns"]
    argv += ["--uid", str(me.uid), "--gid", str(me.gid)]
    # the network namespace comes from the launcher (fresh, loopback only) or is the host's
    argv += [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    argv += ["--die-with-parent", "--as-pid-1", "--new-session", "--bind", f"{box}/merged", "/"]
    if not me.image:  # the host's userland, read-only
        for name in ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / name
            if host.is_dir() and not host.is_symlink():
                argv += ["--ro-bind", str(host), str(host)]
        d = backend.dir
        argv += ["--ro-bind", str(d / "passwd"), "/etc/passwd", "--ro-bind", str(d / "group"), "/etc/group"]
    for inside, host in cfg.ro_binds.items():
        argv += ["--ro-bind", host, inside]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--size", str(cfg.tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    # command output has its own tmpfs: an agent filling /tmp still gets its error messages back
    argv += ["--perms", "0755", "--size", str(cfg.output_size_mb * 1024 * 1024), "--tmpfs", OUTPUT_DIR]
    # "/" always exists; the shell then cds to the workdir (restore_lines). An agent may have deleted
    # the workdir, and the grader's fork of its final state must still start.
    argv += ["--hostname", "sandbox", "--chdir", "/", "--clearenv"]
    for key, value in sandbox_env(env, me).items():
        argv += ["--setenv", key, value]
    argv += ["--setenv", "FF_CTL_FD", str(CTL_FD), "--info-fd", str(INFO_FD)]
    return argv + ["--", "/bin/bash", "--noprofile", "--norc", "-c", KEEPER]
