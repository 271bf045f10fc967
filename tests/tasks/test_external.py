"""Harbor and Terminal-Bench-1 tasks written elsewhere load and grade unchanged, through real sandboxes."""

import asyncio
from pathlib import Path

import pytest

from fireflash.grading.graders import make_grader
from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.loader import load_task
from fireflash.curation.replay import replay_solution

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]
EXTERNAL = Path(__file__).parent / "fixtures" / "external"
EXAMPLES = [
    "harbor/hello-file",
    "harbor/csv-dedupe",
    "harbor/word-stats",
    "tb1/greeting-file",
    "tb1/fix-json-config",
    "tb1/count-python-lines",
]

PARTIAL_WORDSTATS = b"""import re
from collections import Counter


def count_words(text):
    return dict(Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text)))
"""


async def grade_examples():
    backend = make_backend(SandboxConfig())
    results = {}
    try:
        for name in EXAMPLES:
            task = load_task(EXTERNAL / name)
            grader = make_grader(task.grader)
            parent = await backend.prepare(task.environment, task.id)
            solved = await parent.fork()
            await replay_solution(solved, task.solution_path, task.environment.workdir, timeout_sec=120)
            results[name] = (await grader.grade(task, solved), await grader.grade(task, await parent.fork()))
            if name == "harbor/word-stats":
                partial = await parent.fork()
                await partial.write_file("/workspace/wordstats.py", PARTIAL_WORDSTATS)
                results["partial"] = (await grader.grade(task, partial), None)
    finally:
        await backend.close()
    return results


@pytest.fixture(scope="module")
def graded():
    return asyncio.run(grade_examples())


@pytest.mark.parametrize("name", EXAMPLES)
def test_reference_solves_and_nothing_scores_zero(graded, name):
    solved, nothing = graded[name]
    assert solved.solved and solved.reward == 1.0, solved.log
    assert nothing.reward == 0.0 and not nothing.solved


def test_pytest_tasks_get_partial_credit_from_junit(graded):
    partial, _ = graded["partial"]
    assert (partial.checks_passed, partial.checks_total) == (2, 5) and partial.reward == pytest.approx(0.4)
    assert "\x1b[" not in partial.log  # colour disabled


def test_reward_txt_task_keeps_junit_check_counts(graded):
    solved, nothing = graded["harbor/hello-file"]
    assert (solved.checks_passed, solved.checks_total) == (2, 2)
    assert (nothing.checks_passed, nothing.checks_total) == (0, 2)
