"""storage_mb is a disk quota, not a tmpfs that eats memory_mb (issue 26 Deliver 5; sandbox/disks.py).

A sandbox's writes (its overlay upper dir) live on its own ext4 filesystem of ``storage_mb``: a write past
it fails with ENOSPC in the agent's sandbox and in the verifier's fork, and writing more than ``memory_mb``
(but less than ``storage_mb``) succeeds instead of being OOM-killed. Skipped where the host gives no loop
devices (``Disks.note`` says why; the backend then logs it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fireflash.protocols import TaskEnvironment
from fireflash.sandbox import SandboxConfig, SandboxUnavailable
from fireflash.sandbox.disks import Disks, _why_not

pytestmark = pytest.mark.sandbox

MEMORY_MB, STORAGE_MB = 64, 160


@pytest.fixture(scope="module")
def env(task_files: Path) -> TaskEnvironment:
    return TaskEnvironment(files_dir=task_files, memory_mb=MEMORY_MB, pids_max=64, storage_mb=STORAGE_MB, cpus=1.0)


@pytest.fixture(autouse=True, scope="module")
def _disks(backend) -> None:
    if backend.disks.note is not None:
        pytest.skip(f"no per-sandbox disks here: {backend.disks.note}")


def sh(run, sandbox, command: str, timeout_sec: float = 60.0):
    return run(sandbox.exec(command, timeout_sec=timeout_sec))


def test_writes_past_storage_mb_fail_with_enospc(run, sandbox):
    r = sh(run, sandbox, f"dd if=/dev/zero of=/app/fill bs=1M count={STORAGE_MB + 40} 2>&1; echo rc=$?")
    assert "No space left on device" in r.preview and "rc=1" in r.preview
    r = sh(run, sandbox, "python3 -c \"open('/app/more','wb').write(b'x'*(8<<20))\" 2>&1 | tail -1")
    assert "OSError: [Errno 28]" in r.preview  # ENOSPC as the agent's own code sees it
    assert sh(run, sandbox, "rm -f /app/fill /app/more; echo alive").preview == "alive\n"


def test_writes_beyond_memory_mb_do_not_count_as_memory(run, sandbox):
    # a tmpfs upper charged these pages to the 64 MiB memory cgroup: the writer was OOM-killed
    r = sh(run, sandbox, f"dd if=/dev/zero of=/app/big bs=1M count={MEMORY_MB + 36} 2>&1; echo rc=$?")
    assert "rc=0" in r.preview, r.preview
    r = sh(run, sandbox, "stat -c %s /app/big")
    assert int(r.preview) == (MEMORY_MB + 36) << 20


def test_verifier_fork_has_the_same_quota(run, sandbox):
    sh(run, sandbox, "dd if=/dev/zero of=/app/half bs=1M count=40 status=none")
    grading = run(sandbox.fork())
    try:
        r = sh(run, grading, "df -m / | tail -1; dd if=/dev/zero of=/logs-fill bs=1M count=100 2>&1; echo rc=$?")
        assert "No space left on device" not in r.preview.split("\n")[0]
        # the fork starts with an empty disk of its own (the parent's files are a read-only lower layer)
        assert "rc=0" in r.preview
        r = sh(run, grading, "dd if=/dev/zero of=/fill2 bs=1M count=100 2>&1; echo rc=$?")
        assert "No space left on device" in r.preview and "rc=1" in r.preview
    finally:
        run(grading.close())


def test_disk_mode_refuses_a_host_without_loop_devices(tmp_path, monkeypatch):
    import fireflash.sandbox.disks as disks

    monkeypatch.setattr(disks, "_probed", {str(tmp_path): "no /dev/loop-control (test)"})
    with pytest.raises(SandboxUnavailable, match="sandbox.storage = 'disk' but no /dev/loop-control"):
        Disks(SandboxConfig(storage="disk", disk_dir=str(tmp_path)))
    assert Disks(SandboxConfig(storage="auto", disk_dir=str(tmp_path))).note == "no /dev/loop-control (test)"
    assert Disks(SandboxConfig(storage="auto", disk_dir=str(tmp_path))).template(64) is None


def test_disk_dir_on_tmpfs_is_refused():
    path = f"/dev/shm/fireflash-disk-probe-{os.getpid()}"
    try:
        assert "is on tmpfs" in (_why_not(path) or "")
    finally:
        os.rmdir(path)


def test_gate_reports_say_when_storage_mb_is_not_a_disk_quota(tmp_path, monkeypatch):
    import asyncio

    import fireflash.sandbox.disks as disks
    from fireflash.sandbox import make_backend
    from fireflash.curation.gates import validate_task
    from fireflash.tasks.loader import load_task

    valid = Path(__file__).parents[1] / "tasks" / "fixtures" / "gates" / "valid-sort"
    monkeypatch.setattr(disks, "_probed", {str(tmp_path): "no /dev/loop-control (test)"})

    async def run():
        backend = make_backend(SandboxConfig(disk_dir=str(tmp_path), root_dir=f"/dev/shm/ff-dq-{os.getpid()}"))
        try:
            assert backend.disks.note == "no /dev/loop-control (test)"
            return await validate_task(load_task(valid), backend, gates=[4])
        finally:
            await backend.close()

    report = asyncio.run(run())
    assert report.notes == [
        "storage_mb = 512 was not a disk quota in these sandboxes (no /dev/loop-control (test)): their writes went "
        "to a tmpfs of that size, which counts against memory_mb"
    ]
