"""Gate 5 tells the git state a task is built on from a leak of its answer (issue 26 Deliver 6).

A task that keeps its git history (``keep_git_history = true``) is judged by what the history holds: the
reference solution's output in an object beyond HEAD is the task's premise when the task declares how it
is reached (``git_premise``), and a leak otherwise. Fixtures: "recover the file a reset threw away" (the
answer is reached through the reflog: premise when declared, leak when not) and a repository whose
``future`` branch holds the answer (a leak, whatever premise the task declares for its reflog).
"""

import asyncio
import shutil
from pathlib import Path

import pytest

from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.curation.gates import validate_task
from fireflash.tasks.git_strip import KEEP_FIELD, PREMISE_FIELD
from fireflash.tasks.loader import TaskLoadError, load_task

VALID = Path(__file__).parent / "fixtures" / "gates" / "valid-sort"
ANSWER = "the lost release notes: version 2.4 ships the parser"
GIT_ENV = (
    'ENV GIT_AUTHOR_NAME="t" GIT_AUTHOR_EMAIL="t@x.invalid" GIT_COMMITTER_NAME="t" GIT_COMMITTER_EMAIL="t@x.invalid"\n'
)
RESET_AWAY = f"RUN echo '{ANSWER}' > lost.txt && git add lost.txt && git commit -qm lost && git reset -q --hard HEAD~1\n"
FUTURE_BRANCH = (
    f"RUN git checkout -qb future && echo '{ANSWER}' > lost.txt && git add lost.txt && git commit -qm future "
    "&& git checkout -q main\n"
)
TESTS = f'''from pathlib import Path


def test_recovered():
    assert Path("/app/lost.txt").read_text().strip() == "{ANSWER}"
'''


def recovery_task(tmp: Path, name: str, history: str, environment: str) -> Path:
    task = tmp / name
    shutil.copytree(VALID, task)
    for alt in (task / "solution").glob("alt_*.sh"):
        alt.unlink()
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim-bookworm\nWORKDIR /app\n" + GIT_ENV + "COPY app/ /app/\n"
        "RUN git init -q -b main && git add names.txt && git commit -qm base\n" + history
    )
    (task / "instruction.md").write_text(
        "A commit adding `/app/lost.txt` was thrown away with `git reset`. Recover `/app/lost.txt` as it was."
    )
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ncd /app && git show HEAD@{1}:lost.txt > lost.txt\n")
    (task / "tests" / "test_outputs.py").write_text(TESTS)
    toml = (task / "task.toml").read_text().replace("[environment]\n", f"[environment]\n{environment}\n")
    (task / "task.toml").write_text(toml)
    return task


@pytest.fixture(scope="module")
def gate5(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("premise")
    tasks = {
        "undeclared": recovery_task(tmp, "undeclared", RESET_AWAY, f"{KEEP_FIELD} = true"),
        "premise": recovery_task(tmp, "premise", RESET_AWAY, f'{KEEP_FIELD} = true\n{PREMISE_FIELD} = ["reflogs"]'),
        "future": recovery_task(
            tmp, "future", RESET_AWAY.replace("git reset", "git reset") + FUTURE_BRANCH,
            f'{KEEP_FIELD} = true\n{PREMISE_FIELD} = ["reflogs", "unreachable"]',
        ),
    }

    async def run():
        backend = make_backend(SandboxConfig())
        try:
            return {
                n: (await validate_task(load_task(p), backend, GatesConfig(), gates=[1, 5])).gates
                for n, p in tasks.items()
            }
        finally:
            await backend.close()

    return asyncio.run(run())


@pytest.mark.sandbox
def test_the_declared_premise_is_a_note(gate5):
    reference, no_leaks = gate5["premise"]
    assert reference.status == "passed", reference.detail  # the solution recovers it from the reflog
    assert no_leaks.status == "passed", no_leaks.detail
    assert f"the answer it holds is the task's premise ({PREMISE_FIELD} = ['reflogs'])" in no_leaks.detail


@pytest.mark.sandbox
def test_kept_history_holding_the_answer_without_a_premise_is_a_leak(gate5):
    _, no_leaks = gate5["undeclared"]
    assert no_leaks.status == "failed", no_leaks.detail
    assert "/app: git history reached by reflogs holds the reference solution's output" in no_leaks.detail
    assert f"[environment] {PREMISE_FIELD} = ['reflogs']" in no_leaks.detail  # the fix, named


@pytest.mark.sandbox
def test_future_commits_holding_the_answer_are_a_leak_whatever_the_premise(gate5):
    _, no_leaks = gate5["future"]
    assert no_leaks.status == "failed", no_leaks.detail
    assert "/app: git history reached by refs holds the reference solution's output" in no_leaks.detail


@pytest.mark.unit
def test_git_premise_is_validated_by_name(tmp_path):
    bad = recovery_task(tmp_path, "bad", RESET_AWAY, f'{KEEP_FIELD} = true\n{PREMISE_FIELD} = ["dangling"]')
    with pytest.raises(TaskLoadError, match=r"git_premise = \['dangling'\]: unknown kind\(s\) \['dangling'\]"):
        load_task(bad)
    stripped = recovery_task(tmp_path, "stripped", RESET_AWAY, f'{PREMISE_FIELD} = ["reflogs"]')
    with pytest.raises(TaskLoadError, match="git_premise is set but keep_git_history is not true"):
        load_task(stripped)
    assert load_task(recovery_task(tmp_path, "ok", RESET_AWAY, f'{KEEP_FIELD} = true\n{PREMISE_FIELD} = ["reflogs"]')
                     ).metadata[PREMISE_FIELD] == ["reflogs"]

