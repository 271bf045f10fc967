"""The host's container tool (podman, buildah or docker), called the way that works on this kind of host.

    tool = find_tool("auto")                       # podman, else buildah, else docker with a live daemon
    tool.exists("localhost/fireflash/debian:trixie")
    done = run_logged(tool.argv("build", ...), log_path, on_line=print, timeout_sec=600)

Podman and buildah are given ``--runtime runc --cgroup-manager cgroupfs`` on every call when runc is
installed: their default runtime, crun, fails on hosts with hybrid cgroups ("cgroups in hybrid mode not
supported", MEASURED.md "Containers and images"), and cgroupfs needs no systemd. Passing flags keeps the
host's own containers.conf untouched. Images live in the tool's normal store, so ``podman images`` lists them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fireflash.sandbox.errors import SandboxError, SandboxUnavailable

Builder = Literal["auto", "podman", "buildah", "docker"]
KINDS = ("podman", "buildah", "docker")
# runc is in /usr/sbin on Debian, which a non-root PATH may lack; podman finds it there regardless
_RUNC_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin", "/usr/local/bin")
INSTALL_FIX = "run `make setup` (installs podman, buildah, runc and mmdebstrap with apt) or apt-get install -y podman runc"


class ContainerToolMissing(SandboxUnavailable):
    """No usable container tool (or not the one configured); the message says how to install or choose one."""


class ContainerCommandFailed(SandboxError):
    """A container tool command exited non-zero; ``output`` holds its last lines."""

    def __init__(self, argv: list[str], returncode: int, output: str) -> None:
        self.argv, self.returncode, self.output = argv, returncode, output
        super().__init__(f"`{' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''}` exited {returncode}:\n{output[-3000:]}")


@dataclass(frozen=True)
class ImageInfo:
    id: str  # the full image id (sha256 hex, no prefix)
    labels: dict[str, str]
    env: tuple[str, ...] = ()  # its ENV, as KEY=VALUE lines
    workdir: str = ""  # its WORKDIR ('' when none)
    user: str = ""  # its USER ('' when none: root)


@dataclass(frozen=True)
class ContainerTool:
    """One container tool and the global flags it needs.

    Attributes:
        kind: 'podman', 'buildah' or 'docker'.
        path: the executable.
        runtime: the OCI runtime passed as ``--runtime`` ('runc'), or None to let the tool choose.
    """

    kind: str
    path: str
    runtime: str | None = None

    def argv(self, *args: str) -> list[str]:
        """The full command line for ``args`` (a subcommand and its options), global flags included."""
        head = [self.path]
        if self.kind == "podman":
            head += (["--runtime", self.runtime] if self.runtime else []) + ["--cgroup-manager", "cgroupfs"]
        elif self.kind == "buildah":
            head += ["--cgroup-manager", "cgroupfs"]
        return head + list(args)

    def run(self, *args: str, timeout_sec: float = 120.0) -> str:
        """Run a short command and return its stdout.

        Raises:
            ContainerCommandFailed: non-zero exit or timeout (the output's tail is in the message).
        """
        argv = self.argv(*args)
        try:
            # no stdin: podman would otherwise prompt on a terminal to choose a registry for a short name
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_sec, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise ContainerCommandFailed(argv, -1, f"timed out after {timeout_sec:.0f} s\n{e.stderr or ''}") from None
        if done.returncode != 0:
            raise ContainerCommandFailed(argv, done.returncode, (done.stdout + done.stderr).strip())
        return done.stdout

    def exists(self, ref: str) -> bool:
        """Whether image ``ref`` is in the local store (no registry is contacted)."""
        args = {"podman": ("image", "exists", ref), "buildah": ("inspect", "--type", "image", ref)}.get(
            self.kind, ("image", "inspect", ref)
        )
        done = subprocess.run(self.argv(*args), capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
        return done.returncode == 0

    def inspect(self, ref: str) -> ImageInfo:
        """Id, labels and run configuration (ENV, WORKDIR, USER) of local image ``ref``.

        Raises:
            ContainerCommandFailed: the image is not in the local store.
        """
        if self.kind == "buildah":  # its --format templates have no json function
            data = json.loads(self.run("inspect", "--type", "image", ref))
            image_id, config = data["FromImageID"], data["OCIv1"].get("config") or {}
        else:
            data = json.loads(self.run("image", "inspect", ref))[0]
            image_id, config = data["Id"], data.get("Config") or {}
        return ImageInfo(image_id.removeprefix("sha256:"), config.get("Labels") or {}, tuple(config.get("Env") or ()),
                         config.get("WorkingDir") or "", config.get("User") or "")

    def pull(self, ref: str, timeout_sec: float) -> str | None:
        """Try to pull ``ref``; returns None on success, else why not (the tool's last line, or a timeout)."""
        if timeout_sec <= 0:
            return "pulling is off (sandbox.image_pull_timeout_sec = 0)"
        try:
            self.run("pull", "-q", ref, timeout_sec=timeout_sec)
        except ContainerCommandFailed as e:
            lines = [line for line in e.output.splitlines() if line.strip()]
            return lines[-1] if lines else f"exited {e.returncode}"
        return None

    def build_args(
        self,
        dockerfile: Path,
        context: Path,
        tag: str,
        build_args: dict[str, str],
        volumes: list[tuple[str, str]],
        labels: dict[str, str],
    ) -> list[str]:
        """The full build command line: ``-f dockerfile`` over ``context``, tagged ``tag``.

        ``volumes`` (host path, path inside) are bound read-only into every RUN step (podman and buildah;
        docker's builder has no such option, so they are left out there). Base images are never pulled
        implicitly by podman or buildah: the caller has made every FROM image local first.
        """
        args = ["build", "-f", str(dockerfile), "-t", tag]
        if self.kind in ("podman", "buildah"):
            args += ["--pull=never", "--layers"]
            if self.kind == "buildah" and self.runtime:
                args += ["--runtime", self.runtime]
            for host, inside in volumes:
                args += ["--volume", f"{host}:{inside}:ro"]
        for key, value in build_args.items():
            args += ["--build-arg", f"{key}={value}"]
        for key, value in labels.items():
            args += ["--label", f"{key}={value}"]
        return self.argv(*args, str(context))


def _docker_alive(path: str) -> bool:
    try:
        done = subprocess.run([path, "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=15, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _runc() -> str | None:
    found = shutil.which("runc") or next(
        (str(Path(d) / "runc") for d in _RUNC_DIRS if os.access(Path(d) / "runc", os.X_OK)), None
    )
    return "runc" if found else None


def find_tool(choice: Builder = "auto", which: Callable[[str], str | None] = shutil.which,
              docker_alive: Callable[[str], bool] = _docker_alive) -> ContainerTool:
    """The container tool to use (``sandbox.image_builder``): 'auto' takes podman, else buildah, else docker
    when its daemon answers; a named one must be installed (and docker's daemon reachable).

    ``which`` and ``docker_alive`` are injectable so tests can simulate a host.

    Raises:
        ContainerToolMissing: none usable, or the named one is not; the message says how to fix it.
    """
    if choice not in ("auto", *KINDS):
        raise ContainerToolMissing(f"sandbox.image_builder = {choice!r}: choose auto, podman, buildah or docker")
    runtime = _runc()
    for kind in KINDS if choice == "auto" else (choice,):
        path = which(kind)
        if path is None:
            continue
        if kind == "docker" and not docker_alive(path):
            if choice == "docker":
                raise ContainerToolMissing(
                    f"sandbox.image_builder = 'docker': {path} is installed but its daemon does not answer "
                    "(`docker info` failed); start dockerd or set sandbox.image_builder = 'auto'"
                )
            continue
        return ContainerTool(kind, path, runtime if kind != "docker" else None)
    if choice != "auto":
        raise ContainerToolMissing(f"sandbox.image_builder = {choice!r}: {choice} is not installed; {INSTALL_FIX}")
    docker = which("docker")
    why = f" ({docker} is installed but its daemon does not answer)" if docker else ""
    raise ContainerToolMissing(f"no container tool found: podman, buildah or docker{why}; {INSTALL_FIX}")


@dataclass(frozen=True)
class LoggedRun:
    returncode: int  # -1 when it was killed for running past its time
    timed_out: bool
    seconds: float
    tail: str  # its last lines of output


def run_logged(
    argv: list[str],
    log_path: Path,
    on_line: Callable[[str], None] | None = None,
    timeout_sec: float = 3600.0,
    tail_lines: int = 40,
) -> LoggedRun:
    """Run a long command (a build, mmdebstrap), its stdout and stderr going to ``log_path`` line by line.

    Args:
        on_line: called with each output line as it arrives (for progress), on a reader thread.
        timeout_sec: past this, the command's whole process group is killed.

    Returns:
        The exit status and the last ``tail_lines`` lines of output.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    tail: deque[str] = deque(maxlen=tail_lines)
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", start_new_session=True)

        def read() -> None:
            for line in proc.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
                if on_line is not None:
                    on_line(line.rstrip("\n"))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout_sec)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
        finally:
            if proc.returncode is None:  # interrupted (Ctrl-C): take the build down with us
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        reader.join(timeout=10)
    return LoggedRun(-1 if timed_out else proc.returncode, timed_out, time.monotonic() - start, "\n".join(tail))
