"""Deduplicated exports of real images sharing a base (issue 30), and a live backend's hold against eviction.

The image-backed tests' image (conftest.sandbox_image) and a child of it adding one small file, built
once per module, exported into this module's own cache (evicting in the session's would cost the other
modules their exports). Measured 2026-12-03 at load average 6-7 on 2 cores: ~30 s with the images built,
most of it three exports of ~190 MB.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from fireflash.protocols import TaskEnvironment
from fireflash.sandbox import SandboxConfig
from fireflash.sandbox.containers import find_tool
from fireflash.sandbox.rootfs import image_rootfs
from fireflash.sandbox.rootfs_cache import record_and_evict, sidecar_path
from fireflash.sandbox.rootfs_dedup import disk_bytes

pytestmark = [pytest.mark.sandbox, pytest.mark.images]
BASE = SandboxConfig().image_uid_base


def _child_image(tmp: Path, base: str, name: str) -> str:
    from fireflash.tasks.images import task_image

    task = tmp / name
    (task / "environment").mkdir(parents=True)
    (task / "instruction.md").write_text("Not a task: a child image of tests/sandbox's image.\n")
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "environment" / "app.txt").write_text(f"{name}\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {base}\nCOPY app.txt /opt/app.txt\n")
    return task_image(task, SandboxConfig(), find_tool("auto"), say=lambda line: None).image


@pytest.fixture(scope="module")
def images(sandbox_image: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    tmp = tmp_path_factory.mktemp("child-images")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIREFLASH_CACHE", str(tmp / "cache"))
        return sandbox_image, _child_image(tmp, sandbox_image, "two")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rootfs-dedup")


@pytest.fixture(scope="module")
def exports(images: tuple[str, str], cache: Path) -> tuple[Path, Path]:
    tool = find_tool("auto")
    return image_rootfs(tool, images[0], cache, BASE), image_rootfs(tool, images[1], cache, BASE)


def _meta(root: Path) -> dict[str, tuple]:
    out = {}
    for parent, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(parent, name)
            st = os.lstat(path)
            link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            xattrs = [] if link is not None else sorted(os.listxattr(path, follow_symlinks=False))
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, link,
                                                 xattrs)
    return out


def test_the_second_export_shares_the_base_and_keeps_every_entrys_metadata(images, exports, tmp_path):
    one, two = exports
    assert os.lstat(two / "usr/bin/bash").st_ino == os.lstat(one / "usr/bin/bash").st_ino
    assert (two / "opt/app.txt").read_text() == "two\n" and not (one / "opt/app.txt").exists()
    plain = image_rootfs(find_tool("auto"), images[1], tmp_path, BASE)  # alone in its cache: nothing to link
    assert os.lstat(plain / "usr/bin/bash").st_nlink == 1
    assert _meta(two) == _meta(plain)
    assert disk_bytes([one, two]) < disk_bytes([one]) + disk_bytes([plain]) // 10


def test_an_export_made_before_sidecars_gets_one_when_used(images, exports, cache):
    one, _ = exports
    sidecar_path(one).unlink()
    assert image_rootfs(find_tool("auto"), images[0], cache, BASE) == one
    assert json.loads(sidecar_path(one).read_text())["layers"][0].startswith("sha256:")  # a reference again


@pytest.fixture(scope="module")
def cfg(root_dir: str, cache: Path) -> SandboxConfig:
    return SandboxConfig(root_dir=root_dir, cgroup_pool_size=1, kill_grace_sec=0.3, image_rootfs_dir=str(cache))


@pytest.fixture(scope="module")
def env(images: tuple[str, str], exports, task_files: Path) -> TaskEnvironment:
    return TaskEnvironment(image=images[1], files_dir=task_files, memory_mb=256, pids_max=128, storage_mb=64)


def test_a_sandbox_writing_a_shared_file_changes_neither_export(run, exports, sandbox):
    one, two = exports
    shared = "usr/lib/os-release"
    assert os.lstat(two / shared).st_ino == os.lstat(one / shared).st_ino
    before = (one / shared).read_bytes()
    result = run(sandbox.exec(f"echo owned >> /{shared} && chmod 600 /{shared} && tail -n 1 /{shared}", timeout_sec=30))
    assert result.exit_code == 0 and result.preview.strip() == "owned"
    assert (one / shared).read_bytes() == (two / shared).read_bytes() == before  # the sandbox's copy-up only
    assert stat.S_IMODE(os.lstat(one / shared).st_mode) == 0o644


def test_an_export_a_live_backend_holds_is_not_evicted(run, backend, exports, sandbox, cache):
    one, two = exports
    assert record_and_evict(cache, 0, 1) == [one]  # a 1-byte cap: all but the held export go
    assert two.is_dir() and not one.exists()
    result = run(sandbox.exec("cat /opt/app.txt && bash -c 'echo ok'", timeout_sec=30))
    assert result.preview.split() == ["two", "ok"]  # its files, linked from the evicted one, still there
