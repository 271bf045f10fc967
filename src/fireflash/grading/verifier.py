"""Run a task's tests on a fork of an attempt's final state and collect what they report.

The agent never sees the tests: they are written into the fork (``write_file`` per file) only after
the attempt ended. ``/logs/verifier`` and ``/tests`` are deleted and recreated in the fork before the tests run, so no
reward file, symlink or report the agent planted survives (RECIPE.md §3, STYLE.md 11). The run has its
own timeout: a hung verifier yields ``timed_out`` and never stalls training.

    output = await run_verifier(task, attempt_sandbox)   # the attempt's sandbox is left untouched
"""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from fireflash.protocols import Sandbox, Task

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
REPORT_FILES = ("reward.json", "reward.txt", "junit.xml")
MARKER = ".fireflash-fresh"
MAX_REPORT_BYTES = 8 * 1024 * 1024
# pytest honours these even when a task's script does not pass them: JUnit for partial credit, no
# colour codes in logs, no cache directory written into the graded tree.
PYTEST_ADDOPTS = f"-p no:cacheprovider --color=no --junitxml={VERIFIER_DIR}/junit.xml"
# Seconds added to the verifier timeout before the grader gives up on the sandbox itself.
SANDBOX_GRACE_SEC = 15.0


@dataclass
class VerifierOutput:
    """What one verifier run left behind (raw; scoring lives in ``graders``)."""

    reports: dict[str, bytes]  # report file name (REPORT_FILES) → its bytes, for those that exist
    exit_code: int | None
    timed_out: bool
    log: str  # preview of the test command's stdout+stderr
    duration_sec: float
    error: str = ""  # a report over MAX_REPORT_BYTES, or the sandbox failing


def list_test_files(tests_dir: Path) -> list[tuple[str, bytes, int]]:
    """(relative path, content, mode) of every file under ``tests_dir``, sorted for determinism.

    Raises:
        FileNotFoundError: ``tests_dir`` is not a directory.
    """
    if not tests_dir.is_dir():
        raise FileNotFoundError(f"{tests_dir}: tests directory missing (GraderSpec.tests_dir)")
    files = []
    for path in sorted(p for p in tests_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        files.append((path.relative_to(tests_dir).as_posix(), path.read_bytes(), path.stat().st_mode & 0o777))
    return files


async def run_verifier(task: Task, sandbox: Sandbox, timeout_sec: float | None = None) -> VerifierOutput:
    """Fork ``sandbox``, copy the tests in, run ``task.grader.test_command``, read the reports.

    Args:
        task: gives the tests directory, test command, working directory and verifier timeout.
        sandbox: the attempt's final state; only a fork of it is touched.
        timeout_sec: overrides ``task.limits.verifier_timeout_sec`` (seconds).

    Returns:
        The raw outcome; never raises for anything the tests or the agent's files do. Sandbox failures
        are returned in ``error``.
    """
    timeout = timeout_sec or task.limits.verifier_timeout_sec
    start = time.monotonic()
    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives
        # as the result lands, leaving a cancelled worker running forever
        async with asyncio.timeout(timeout + SANDBOX_GRACE_SEC):
            return await _run(task, sandbox, timeout, start)
    except TimeoutError:
        return VerifierOutput({}, None, True, "", time.monotonic() - start, "sandbox did not return in time")


async def _run(task: Task, sandbox: Sandbox, timeout: float, start: float) -> VerifierOutput:
    fork = await sandbox.fork()
    try:
        # The fork's user may not delete /tests or /logs themselves (root-owned parents); emptying them
        # is enough. The listing proves nothing the agent left behind survives.
        await fork.exec(
            f"find {TESTS_DIR} {VERIFIER_DIR} -mindepth 1 -delete 2>/dev/null; rm -rf {TESTS_DIR} {VERIFIER_DIR} 2>/dev/null; true",
            timeout_sec=30,
        )
        try:
            await fork.write_file(f"{VERIFIER_DIR}/{MARKER}", b"")
            if task.grader.tests_dir is not None:
                for rel, data, mode in list_test_files(task.grader.tests_dir):
                    await fork.write_file(f"{TESTS_DIR}/{rel}", data, mode=mode)
        except OSError as e:
            return VerifierOutput(
                {},
                None,
                False,
                "",
                time.monotonic() - start,
                f"cannot write {e.filename or TESTS_DIR} in the grading fork ({e.strerror}); the "
                f"sandbox backend must let its user create {TESTS_DIR} and {VERIFIER_DIR}",
            )
        prep = await fork.exec(f"ls -A {VERIFIER_DIR}", timeout_sec=30)
        if prep.exit_code != 0 or prep.preview.split() != [MARKER]:
            return VerifierOutput(
                {},
                prep.exit_code,
                False,
                prep.preview,
                time.monotonic() - start,
                f"{VERIFIER_DIR} is not empty after the reset: {prep.preview[:200]!r}",
            )
        env = {
            "NO_COLOR": "1",
            "PY_COLORS": "0",
            "TERM": "dumb",
            "TEST_DIR": TESTS_DIR,
            "PYTEST_ADDOPTS": PYTEST_ADDOPTS,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        workdir = shlex.quote(task.environment.workdir)
        command = f"cd {workdir} 2>/dev/null; export {exports}; {task.grader.test_command}"
        result = await fork.exec(command, timeout_sec=timeout)
        reports, error = await _read_reports(fork)
        return VerifierOutput(
            reports, result.exit_code, result.timed_out, result.preview, time.monotonic() - start, error
        )
    finally:
        await fork.close()


async def _read_reports(fork: Sandbox) -> tuple[dict[str, bytes], str]:
    names = " ".join(REPORT_FILES)
    listing = await fork.exec(
        f'cd {VERIFIER_DIR} && for f in {names}; do [ -f "$f" ] && echo "$f $(stat -c %s "$f")"; done; true',
        timeout_sec=30,
    )
    reports: dict[str, bytes] = {}
    errors = []
    for line in listing.preview.splitlines():
        name, _, size = line.partition(" ")
        if name not in REPORT_FILES or not size.isdigit():
            continue
        if int(size) > MAX_REPORT_BYTES:
            errors.append(f"{name} is {size} bytes (> {MAX_REPORT_BYTES})")
            continue
        reports[name] = await fork.read_file(f"{VERIFIER_DIR}/{name}")
    return reports, "; ".join(errors)
