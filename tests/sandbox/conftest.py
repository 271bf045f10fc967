"""Fixtures for sandbox tests: one event loop, backend and task parent per module; a fresh fork per test.

Every fixture checks on teardown that nothing is left behind: no process, mount, cgroup or directory.
``sandbox_image`` is the image of the image-backed tests (fixtures/image-task), built with the host's
podman on first use (~1 min; the Debian trixie base must exist or is built, ~1.5 min); without podman,
or not as root, those tests skip.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from fireflash.protocols import TaskEnvironment
from fireflash.sandbox import SandboxConfig, make_backend, procs
from fireflash.sandbox.containers import ContainerToolMissing, find_tool

IMAGE_TASK = Path(__file__).parent / "fixtures" / "image-task"

Run = Callable[[Coroutine[Any, Any, Any]], Any]


def mounts_under(path: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if path in line]


def backend_resources(backend: Any) -> tuple[list[int], list[Path]]:
    """(launcher pids, cgroup dirs) of a backend, to check after close."""
    slots = backend.pool._all
    dirs = [d for s in slots if s.cgroup for d in s.cgroup.dirs.values()]
    tree = backend.pool._tree
    return [s.launcher.pid for s in slots], dirs + (list(tree.roots.values()) if tree else [])


def assert_backend_left_nothing(backend: Any, resources: tuple[list[int], list[Path]]) -> None:
    pids, cgroup_dirs = resources
    assert not backend.dir.exists(), f"backend dir {backend.dir} left behind"
    assert not [p for p in pids if procs.alive(p)], "launcher processes left behind"
    assert not [d for d in cgroup_dirs if d.exists()], "cgroups left behind"
    assert not mounts_under(str(backend.dir)), "mounts left in the host namespace"


def sandbox_processes(sandbox: Any) -> list[tuple[int, str]]:
    """(host pid, start time) of every process of a running sandbox: its pid namespace and its cgroup."""
    pids = set(in_pidns(sandbox._pidns))
    slot = sandbox._slot
    if slot is not None and slot.cgroup is not None:
        pids |= {p for p in slot.cgroup.pids() if p != slot.launcher.pid}
    return [(p, t) for p in pids if (t := _start_time(p))]


def assert_sandbox_left_nothing(sandbox: Any, processes: list[tuple[int, str]]) -> None:
    assert sandbox.closed
    for pid in (sandbox._init_pid, sandbox._bwrap_pid):
        assert not procs.alive(pid), f"sandbox process {pid} still alive after close()"
    survivors = [p for p, t in processes if _start_time(p) == t and procs.alive(p)]
    assert not survivors, f"processes {survivors} survived close()"
    assert not os.path.exists(sandbox.box), "sandbox box dir left behind"


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return ""


def in_pidns(link: str) -> list[int]:
    """Host pids of processes in the pid namespace ``link``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == link:
                    found.append(int(name))
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()


@pytest.fixture(scope="module")
def root_dir(request: pytest.FixtureRequest) -> Iterator[str]:
    path = f"/dev/shm/fireflash-test-{os.getpid()}-{request.module.__name__.rsplit('.', 1)[-1]}"
    yield path
    leftovers = os.listdir(path) if os.path.isdir(path) else []
    shutil.rmtree(path, ignore_errors=True)
    assert not leftovers, f"left in {path}: {leftovers}"


@pytest.fixture(scope="module")
def cfg(root_dir: str) -> SandboxConfig:
    return SandboxConfig(root_dir=root_dir, cgroup_pool_size=1, kill_grace_sec=0.3, preview_chars=200)


@pytest.fixture(scope="module")
def backend(run: Run, cfg: SandboxConfig) -> Iterator[Any]:
    b = make_backend(cfg)
    yield b
    resources = backend_resources(b)
    run(b.close())
    assert_backend_left_nothing(b, resources)


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("task-files")
    (d / "hello.txt").write_text("hello from the task\n")
    (d / "pkg").mkdir()
    (d / "pkg" / "mod.py").write_text("VALUE = 42\n")
    return d


@pytest.fixture(scope="module")
def env(task_files: Path) -> TaskEnvironment:
    return TaskEnvironment(files_dir=task_files, memory_mb=256, pids_max=128, storage_mb=64, cpus=1.0)


@pytest.fixture(scope="module")
def parent(run: Run, backend: Any, env: TaskEnvironment) -> Any:
    return run(backend.prepare(env, "test-task"))


@pytest.fixture
def sandbox(run: Run, parent: Any) -> Iterator[Any]:
    s = run(parent.fork())
    yield s
    processes = sandbox_processes(s) if not s.closed else []
    run(s.close())
    assert_sandbox_left_nothing(s, processes)


@pytest.fixture(scope="session")
def sandbox_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Reference of the image-backed tests' image (fixtures/image-task: trixie, python3, procps, strace, user agent)."""
    if os.geteuid() != 0:
        pytest.skip("image-backed sandboxes need root (as the bwrap backend does)")
    try:
        tool = find_tool("auto")
    except ContainerToolMissing as e:
        pytest.skip(f"no container tool: {e}")
    if tool.kind == "buildah":
        pytest.skip("buildah alone cannot export an image's files; install podman")
    from fireflash.tasks.images import task_image

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIREFLASH_CACHE", str(tmp_path_factory.mktemp("image-cache")))
        return task_image(IMAGE_TASK, SandboxConfig(), tool, say=lambda line: None).image


@pytest.fixture(scope="session")
def image_rootfs_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where this session's backends export image root filesystems (once per image and session)."""
    return str(tmp_path_factory.mktemp("rootfs"))
