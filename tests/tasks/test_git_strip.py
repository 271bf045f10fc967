"""Answer leaks through git are removed by task preparation, not only flagged by gate 5 (issue 27).

Each leak is a repository built with git commands (``git_leak_fixtures``): gate 5 names it on the
environment as it was set up, the loader's last setup command (``STRIP_GIT``) removes it, gate 5 then
passes, and the starting commit, index and working tree are unchanged. A task whose point is its git
state (a dangling commit to recover) opts out with ``keep_git_history`` and gate 5 reports a note.
"""

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from git_leak_fixtures import ANSWER, NESTED, build_leaky_app, git

from fireflash.protocols import Task, TaskEnvironment
from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.curation.gates import validate_task
from fireflash.tasks.git_strip import KEEP_FIELD, STRIP_GIT
from fireflash.tasks.loader import TaskLoadError, load_task

VALID = Path(__file__).parent / "fixtures" / "gates" / "valid-sort"
TB1 = Path(__file__).parent / "fixtures" / "external" / "tb1" / "count-python-lines"
LEAKS = {  # case → what gate 5 must name in /app/<case>
    "sibling": "ref refs/heads/fix (1 commit(s) not in HEAD's history)",
    "pull": "ref refs/pull/1/head (1 commit(s)",
    "original": "ref refs/original/refs/heads/main (1 commit(s)",
    "blob": "1 unreachable object(s): blob",
    "tag": "ref refs/tags/v2 (1 commit(s)",  # in packed-refs
    "notes": "ref refs/notes/commits (1 commit(s)",
    "stash": "ref refs/stash (2 commit(s)",
    "reflog": "reflog logs/HEAD (3 entries)",
    f"nested/{NESTED}": "ref refs/heads/future (1 commit(s)",
}


def _task(files: Path, setup: list[str], **metadata) -> Task:
    env = TaskEnvironment(files_dir=files, setup_commands=setup)
    return Task(id="git-leaks", instruction="Fix `fix.py`.", environment=env, metadata=metadata)


async def _gate5_and_probe(task: Task, probe: str) -> tuple:
    backend = make_backend(SandboxConfig())
    try:
        report = await validate_task(task, backend, GatesConfig(), gates=[5])
        parent = await backend.prepare(task.environment, "probe")
        child = await parent.fork()
        result = await child.exec(probe, timeout_sec=60)
        return report.gates[0], result.preview
    finally:
        await backend.close()


STATE = r"""
for r in sibling pull original blob tag notes stash reflog nested/{nested}; do
  cd /app/$r && echo "$r $(git rev-parse HEAD) $(git status --porcelain | paste -sd,) \
fsck=$(git fsck --full --no-dangling 2>&1 | wc -l) refs=$(git for-each-ref | wc -l) \
answer=$(git cat-file --batch-all-objects --batch | grep -c 'the answer')"
done
""".replace("{nested}", NESTED)


@pytest.mark.sandbox
def test_gate_5_names_each_git_leak_and_preparation_removes_it(tmp_path):
    heads = build_leaky_app(tmp_path)
    leaky, _ = asyncio.run(_gate5_and_probe(_task(tmp_path / "app", []), "true"))
    assert leaky.status == "failed"
    for case, finding in LEAKS.items():
        assert f"/app/{case}: {finding}" in leaky.detail, (case, leaky.detail)
    assert "/app/pull: remote origin (https://example.invalid/project.git)" in leaky.detail
    assert "/app/pull: ref refs/remotes/origin/fix (1 commit(s)" in leaky.detail
    assert "unreachable object(s): " in leaky.detail and "keep_git_history = true" in leaky.detail

    stripped, state = asyncio.run(_gate5_and_probe(_task(tmp_path / "app", [STRIP_GIT]), STATE))
    assert stripped.status == "passed", stripped.detail
    # the starting commit, the index (a staged file) and the working tree (an untracked file) are kept;
    # every object HEAD needs is there; only the current branch is left; the answer is nowhere
    expected = [
        f"{case} {heads[case.split('/')[0]]} A  staged.txt,?? untracked.txt fsck=0 refs=1 answer=0" for case in LEAKS
    ]
    assert state.splitlines() == expected, state


@pytest.mark.sandbox
def test_preparation_keeps_an_operation_in_progress(tmp_path):
    # a "resolve this merge" task: MERGE_HEAD's commit stays although its branch is stripped
    repo = tmp_path / "app" / "merge"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for branch, text in (("main", "a"), ("other", "b"), ("main", "c")):
        if branch == "other":
            git(repo, "checkout", "-qb", "other")
        elif git(repo, "branch", "--show-current") != "main":
            git(repo, "checkout", "-q", "main")
        (repo / "f").write_text(text + "\n")
        git(repo, "add", "f")
        git(repo, "commit", "-qm", text)
    with pytest.raises(subprocess.CalledProcessError):
        git(repo, "merge", "other")
    probe = "cd /app/merge && git status --porcelain && git merge --abort && git log --format=%s | paste -sd,"
    gate, out = asyncio.run(_gate5_and_probe(_task(tmp_path / "app", [STRIP_GIT]), probe))
    assert gate.status == "passed", gate.detail
    assert out.split() == ["UU", "f", "c,a"], out


def _harbor_task(tmp_path: Path, keep: str | None) -> Path:
    """A git-recovery task: the commit it is built on was reset away and must be found in the reflog."""
    task = tmp_path / "recover"
    shutil.copytree(VALID, task)
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim-bookworm\nWORKDIR /app\n"
        'ENV GIT_AUTHOR_NAME="t" GIT_AUTHOR_EMAIL="t@x.invalid" GIT_COMMITTER_NAME="t" '
        'GIT_COMMITTER_EMAIL="t@x.invalid"\nCOPY app/ /app/\n'
        "RUN git init -q -b main && git add names.txt && git commit -qm base\n"
        f"RUN echo '{ANSWER}' > lost.txt && git add lost.txt && git commit -qm lost && git reset -q --hard HEAD~1\n"
    )
    if keep is not None:
        text = (task / "task.toml").read_text().replace("[environment]\n", f"[environment]\n{KEEP_FIELD} = {keep}\n")
        (task / "task.toml").write_text(text)
    return task


@pytest.mark.unit
def test_loader_strips_last_unless_the_task_keeps_its_git_history(tmp_path):
    stripped = load_task(_harbor_task(tmp_path / "a", None))
    assert stripped.environment.setup_commands[-1] == STRIP_GIT and KEEP_FIELD not in stripped.metadata
    kept = load_task(_harbor_task(tmp_path / "b", "true"))
    assert STRIP_GIT not in kept.environment.setup_commands and kept.metadata[KEEP_FIELD] is True
    with pytest.raises(TaskLoadError, match=f"{KEEP_FIELD} = 'yes' must be bool"):
        load_task(_harbor_task(tmp_path / "c", "'yes'"))
    tb1 = tmp_path / "tb1"
    shutil.copytree(TB1, tb1)
    assert load_task(tb1).environment.setup_commands[-1] == STRIP_GIT
    (tb1 / "task.yaml").write_text((tb1 / "task.yaml").read_text() + f"\n{KEEP_FIELD}: true\n")
    assert STRIP_GIT not in load_task(tb1).environment.setup_commands and load_task(tb1).metadata[KEEP_FIELD]


RECOVER = "cd /app && git log -g --format=%s 2>/dev/null | paste -sd, ; git fsck --lost-found 2>/dev/null | cut -c1-16"


@pytest.mark.sandbox
def test_a_git_recovery_task_keeps_its_dangling_commit_with_a_note(tmp_path):
    stripped, out = asyncio.run(_gate5_and_probe(load_task(_harbor_task(tmp_path / "a", None)), RECOVER))
    assert stripped.status == "passed" and out.split() == [], (stripped.detail, out)

    kept, out = asyncio.run(_gate5_and_probe(load_task(_harbor_task(tmp_path / "b", "true")), RECOVER))
    assert kept.status == "passed", kept.detail
    assert kept.detail.startswith(f"note: {KEEP_FIELD} = true") and "/app: reflog logs/HEAD" in kept.detail
    assert out.split()[:2] == ["base,lost,base", "dangling"], out
