"""Grading through real sandboxes: a fork sees the tests, the attempt never does; planted reports and
hung verifiers score 0."""

import asyncio

import pytest

from fireflash.grading.graders import make_grader
from fireflash.grading.verifier import run_verifier
from fireflash.protocols import GraderSpec, Task, TaskLimits
from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.loader import DATA_DIR, load_task
from fireflash.curation.replay import replay_solution

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]


def run(coro):
    return asyncio.run(coro)


async def with_backend(fn):
    backend = make_backend(SandboxConfig())
    try:
        return await fn(backend)
    finally:
        await backend.close()


def test_reference_solves_and_tests_stay_out_of_the_attempt():
    task = load_task(DATA_DIR / "train" / "text-grep-errors")

    async def body(backend):
        parent = await backend.prepare(task.environment, task.id)
        attempt = await parent.fork()
        await replay_solution(attempt, task.solution_path, task.environment.workdir)
        score = await make_grader(task.grader).grade(task, attempt)
        leftovers = await attempt.exec("ls -A /tests /logs/verifier 2>/dev/null; true")
        nothing = await make_grader(task.grader).grade(task, await parent.fork())
        return score, leftovers.preview.strip(), nothing

    score, leftovers, nothing = run(with_backend(body))
    assert (score.reward, score.solved, score.checks_passed, score.checks_total) == (1.0, True, 3, 3)
    assert "test_outputs.py" not in leftovers and "junit" not in leftovers
    assert (nothing.reward, nothing.checks_passed, nothing.checks_total) == (0.0, 0, 3)


def test_planted_reward_file_is_ignored():
    task = load_task(DATA_DIR / "train" / "text-grep-errors")

    async def body(backend):
        attempt = await (await backend.prepare(task.environment, task.id)).fork()
        planted = await attempt.exec(
            "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt "
            "&& echo '{\"reward\": 1}' > /logs/verifier/reward.json && echo PLANTED"
        )
        return "PLANTED" in planted.preview, await make_grader(task.grader).grade(task, attempt)

    planted, score = run(with_backend(body))
    assert score.reward == 0.0 and score.reason == ""  # scored from the fresh JUnit report, not the plant
    assert planted or score.checks_total == 3


def test_hung_verifier_scores_zero_with_timeout():
    task = Task(
        id="hang",
        instruction="nothing",
        grader=GraderSpec(test_command="sleep 60"),
        limits=TaskLimits(verifier_timeout_sec=1.0),
    )

    async def body(backend):
        attempt = await (await backend.prepare(task.environment, task.id)).fork()
        output = await run_verifier(task, attempt)
        return output, await make_grader(task.grader).grade(task, attempt)

    output, score = run(with_backend(body))
    assert output.timed_out and output.duration_sec < 10
    assert (score.reward, score.reason) == (0.0, "timeout")


def test_agent_that_deleted_its_workdir_scores_zero_not_a_grader_error():
    task = load_task(DATA_DIR / "train" / "text-grep-errors")

    async def body(backend):
        attempt = await (await backend.prepare(task.environment, task.id)).fork()
        await attempt.exec(f"cd /; rm -rf {task.environment.workdir}")
        return await make_grader(task.grader).grade(task, attempt)

    score = run(with_backend(body))
    # the task's test.sh starts with `cd /app || exit 1`: the tests ran, found nothing and wrote no report
    assert (score.reward, score.solved, score.reason) == (0.0, False, "no_report")


def test_test_command_gets_a_clean_environment():
    """env -i: system PATH first (then the task's own dirs), a fresh HOME, no user site, nothing the agent exported."""
    from fireflash.protocols import TaskEnvironment

    probe = (
        "echo PATH=$PATH; echo HOME=$HOME; echo EVIL=${EVIL:-unset}; echo NOUSER=$PYTHONNOUSERSITE; "
        "ls -A $HOME | wc -l | sed 's/^/HOMEFILES=/'; setsid sleep 1000 >/dev/null 2>&1 & true"
    )
    task = Task(
        id="t-env",
        instruction="x",
        environment=TaskEnvironment(env={"PATH": "/opt/venv/bin:/usr/bin", "TASKVAR": "1"}),
        grader=GraderSpec(test_command=probe),
        limits=TaskLimits(verifier_timeout_sec=20),
    )

    async def body(backend):
        parent = await backend.prepare(task.environment, task.id)
        attempt = await parent.fork()
        await attempt.exec("echo 'export EVIL=1' >> ~/.bashrc; export EVIL=1; true")
        output = await run_verifier(task, attempt)
        return output.log

    log = run(with_backend(body))
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/venv/bin\n" in log
    assert "HOME=/tmp/fireflash-verifier-home." in log and "HOMEFILES=0" in log
    assert "EVIL=unset" in log and "NOUSER=1" in log


def test_kill_strays_is_a_no_op_outside_a_bwrap_sandbox():
    """On the host (the unsafe-local backend) `kill -1` would hit every process of the user: guarded."""
    import subprocess

    from fireflash.grading.verifier import KILL_STRAYS

    harmless = KILL_STRAYS.replace("kill -KILL -1", "echo WOULD-KILL")
    assert harmless != KILL_STRAYS
    out = subprocess.run(["bash", "-c", harmless], capture_output=True, text=True, check=False).stdout
    assert "WOULD-KILL" not in out


def test_kill_strays_kills_every_other_process_in_a_bwrap_sandbox():
    from fireflash.grading.verifier import KILL_STRAYS
    from fireflash.protocols import TaskEnvironment

    async def body(backend):
        sandbox = await (await backend.prepare(TaskEnvironment(), "t-kill")).fork()
        before = await sandbox.exec(
            "setsid sleep 1000 >/dev/null 2>&1 & sleep 0.3; grep -la '^sleep.1000' /proc/[0-9]*/cmdline | wc -l"
        )
        after = await sandbox.exec(
            f"{KILL_STRAYS}; sleep 0.3; grep -la '^sleep.1000' /proc/[0-9]*/cmdline | wc -l"
        )
        return before.preview.strip(), after.preview.strip()

    before, after = run(with_backend(body))
    assert before.endswith("1") and after.endswith("0"), (before, after)
