"""Grading through real sandboxes: a fork sees the tests, the attempt never does; planted reports and
hung verifiers score 0."""

import asyncio

import pytest

from fireflash.grading.graders import make_grader
from fireflash.grading.verifier import run_verifier
from fireflash.protocols import GraderSpec, Task, TaskLimits
from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.loader import DATA_DIR, load_task
from fireflash.tasks.replay import replay_solution

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
