"""An agent that fills its sandbox's pids limit pays for it (its processes are killed, a tool result says so);
the sandbox stays usable and nothing is reported as an infrastructure failure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fireflash.protocols import TaskEnvironment
from fireflash.sandbox import SandboxConfig

pytestmark = pytest.mark.sandbox

PIDS_MAX = 64
KILLED = f"[the sandbox reached its limit of {PIDS_MAX} processes: no new shell could start, so every process"


@pytest.fixture(scope="module")
def cfg(root_dir: str) -> SandboxConfig:
    # a short start timeout: one scenario lets a shell's own fork fail, which shows as a start timeout; not
    # shorter, since the launcher's answer shares it and a CI run under load once missed 2 s during a fork loop
    return SandboxConfig(root_dir=root_dir, cgroup_pool_size=1, kill_grace_sec=0.3, preview_chars=400,
                         start_timeout_sec=5.0)


@pytest.fixture(scope="module")
def env(task_files: Path) -> TaskEnvironment:
    return TaskEnvironment(files_dir=task_files, memory_mb=256, pids_max=PIDS_MAX, storage_mb=64, cpus=1.0)


def _fill_then_run(run, sandbox, filler: str) -> tuple:
    """Run ``filler`` as the agent's Bash tool does (moved to the background on timeout), then two plain commands:
    the first needs a new shell (the old one is the filler's job), the second reuses it."""
    first = run(sandbox.exec(filler, timeout_sec=2, on_timeout="background"))
    assert first.timed_out and first.job_id is not None
    moved = run(sandbox.exec("cd /tmp && export KEEP=yes && echo moved", timeout_sec=30, on_timeout="background"))
    after = run(sandbox.exec('echo "$PWD $KEEP"; ls /app/hello.txt', timeout_sec=30, on_timeout="background"))
    return moved, after


def _assert_recovered(run, sandbox, moved, after) -> None:
    assert not moved.timed_out and moved.exit_code == 0, moved
    assert moved.preview.startswith("moved\n") and KILLED in moved.preview  # a tool result, not an exception
    assert after.exit_code == 0 and after.preview.split() == ["/tmp", "yes", "/app/hello.txt"]
    jobs = run(sandbox.jobs())
    assert jobs and not any(j.running for j in jobs)  # the filler's job was killed with everything else


def test_orphaned_sleepers_filling_the_limit_cost_the_agent_its_processes(run, sandbox):
    # orphans are reparented to the sandbox's pid 1: no kill of the command's tree would free them
    _assert_recovered(run, sandbox, *_fill_then_run(run, sandbox, "for i in $(seq 1 200); do (sleep 300 &); done"))


def test_fork_bomb_keeps_the_sandbox_usable(run, sandbox):
    t0 = time.monotonic()
    bomb = run(sandbox.exec(":(){ :|:& };:", timeout_sec=2, on_timeout="background"))
    assert bomb.exit_code == 0  # the bomb's first call returns at once; its processes fill the limit
    # a builtin loop needs no fork: it times out and moves to the background, so the next command needs a new shell
    loop = run(sandbox.exec("while :; do :; done", timeout_sec=1, on_timeout="background"))
    assert loop.timed_out and loop.job_id is not None
    # usually the bomb still fills the limit and is killed (the note); it may also have burnt out already, or a
    # freed pid let the new shell start: the command runs either way, never an exception
    result = run(sandbox.exec("echo alive", timeout_sec=10, on_timeout="background"))
    assert result.exit_code == 0 and result.preview.startswith("alive\n"), result
    again = run(sandbox.exec("echo still alive", timeout_sec=10, on_timeout="background"))
    assert again.exit_code == 0 and again.preview.startswith("still alive"), again
    assert time.monotonic() - t0 < 30


def test_python_fork_loop_keeps_the_sandbox_usable(run, sandbox):
    filler = "python3 -c 'import os\nwhile True:\n  try: os.fork()\n  except OSError: pass'"
    _assert_recovered(run, sandbox, *_fill_then_run(run, sandbox, filler))


def test_a_shell_whose_own_fork_fails_is_also_recovered(run, sandbox):
    # leaves exactly one free pid: the launcher's fork of the shell wrapper succeeds, the wrapper's fork of bash
    # cannot, so the shell never says hello (a start timeout, not the launcher's EAGAIN)
    filler = (
        "python3 -c '\nimport os, signal, time\nkids = []\nwhile True:\n  try: pid = os.fork()\n"
        "  except OSError: break\n  if pid == 0: time.sleep(600); os._exit(0)\n  kids.append(pid)\n"
        "os.kill(kids[-1], signal.SIGKILL); os.waitpid(kids[-1], 0)\nprint(\"one free\", flush=True)\n"
        "time.sleep(600)'"
    )
    first = run(sandbox.exec(filler, timeout_sec=3, on_timeout="background"))
    assert first.timed_out and "one free" in first.preview
    result = run(sandbox.exec("echo alive", timeout_sec=30, on_timeout="background"))
    assert result.exit_code == 0 and result.preview.startswith("alive") and KILLED in result.preview, result
