"""The unsafe-local backend: same protocol, no isolation, a warning on every start."""

from __future__ import annotations

import logging

import pytest

from fireflash.protocols import Sandbox, SandboxBackend, TaskEnvironment
from fireflash.sandbox import SandboxClosed, SandboxConfig, make_backend

pytestmark = pytest.mark.unit


def test_local_backend_round_trip(tmp_path, task_files, caplog):
    async def scenario() -> None:
        backend = make_backend(
            SandboxConfig(backend="unsafe-local", root_dir=str(tmp_path / "root"), kill_grace_sec=0.3)
        )
        assert isinstance(backend, SandboxBackend)
        with caplog.at_level(logging.WARNING, logger="fireflash.sandbox"):
            parent = await backend.prepare(
                TaskEnvironment(files_dir=task_files, setup_commands=["echo s > setup.txt"]), "t"
            )
        assert isinstance(parent, Sandbox) and "NO isolation" in caplog.text
        r = await parent.exec("cat hello.txt setup.txt; cd pkg; export V=1")
        assert (r.exit_code, r.preview) == (0, "hello from the task\ns\n")
        assert (await parent.exec('basename "$PWD"; echo $V; exit 3')).exit_code == 3
        assert (await parent.exec('basename "$PWD"; echo $V')).preview == "pkg\n1\n"
        child = await parent.fork()
        await child.write_file("/app/new.bin", b"\x00\xff")
        await child.exec("rm hello.txt")
        assert await child.read_file("/app/new.bin") == b"\x00\xff"
        assert await child.diff() == ["/app/hello.txt", "/app/new.bin"]
        assert await parent.read_file("/app/hello.txt") == b"hello from the task\n"
        r = await child.exec("sleep 5", timeout_sec=0.2)
        assert r.timed_out and r.exit_code is None
        job = (await child.exec("sleep 0.1; echo done", background=True)).job_id
        await child.kill_job(job)
        await child.close()
        with pytest.raises(SandboxClosed):
            await child.exec("true")
        await backend.close()
        assert not (tmp_path / "root").exists() or not any((tmp_path / "root").iterdir())

    import asyncio

    asyncio.run(scenario())
