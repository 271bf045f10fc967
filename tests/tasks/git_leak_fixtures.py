"""Git repositories that leak a task's answer, one per technique, built with git commands (issue 27).

``build_leaky_app(root)`` writes ``root/app/<case>/`` repositories; each starts at a commit whose
``fix.py`` holds ``BUG`` and hides a version holding ``ANSWER`` somewhere git can reach it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ANSWER = "return sorted(items)  # the answer"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid", "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}
NESTED = "deep/a/b/c/d/e"  # the nested case's repository sits 6 directories below /app/nested


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], env=ENV, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(repo: Path, text: str, message: str) -> str:
    (repo / "fix.py").write_text(text + "\n")
    git(repo, "add", "fix.py")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def _base(repo: Path) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    _commit(repo, "first", "first")


def build_leaky_app(root: Path) -> dict[str, str]:
    """Write one repository per leak under ``root/app``; returns case → the HEAD each must keep."""
    app = root / "app"
    heads: dict[str, str] = {}

    def finish(case: str, repo: Path) -> None:
        (repo / "untracked.txt").write_text("work in progress\n")  # the working tree the task set up
        (repo / "staged.txt").write_text("staged\n")
        git(repo, "add", "staged.txt")
        heads[case] = git(repo, "rev-parse", "HEAD")

    # a sibling branch forked before the base commit (a PR branch): HEAD is not its ancestor
    repo = app / "sibling"
    _base(repo)
    git(repo, "checkout", "-qb", "fix")
    _commit(repo, ANSWER, "fix")
    git(repo, "checkout", "-q", "main")
    _commit(repo, "BUG", "base")
    finish("sibling", repo)

    # refs/pull/1/head, as a GitHub clone fetched with pull refs has
    repo = app / "pull"
    _base(repo)
    answer = _commit(repo, ANSWER, "fix")
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    git(repo, "update-ref", "refs/pull/1/head", answer)
    git(repo, "remote", "add", "origin", "https://example.invalid/project.git")
    git(repo, "update-ref", "refs/remotes/origin/fix", answer)
    git(repo, "reflog", "expire", "--expire=now", "--all")
    finish("pull", repo)

    # refs/original/refs/heads/main: the backup filter-branch leaves
    repo = app / "original"
    _base(repo)
    answer = _commit(repo, ANSWER, "fix")
    git(repo, "update-ref", "refs/original/refs/heads/main", answer)
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    finish("original", repo)

    # a blob nothing points to, written with hash-object -w
    repo = app / "blob"
    _base(repo)
    (root / "answer.txt").write_text(ANSWER + "\n")
    git(repo, "hash-object", "-w", str(root / "answer.txt"))
    finish("blob", repo)

    # a tag on a commit that is not in HEAD's history
    repo = app / "tag"
    _base(repo)
    answer = _commit(repo, ANSWER, "fix")
    git(repo, "tag", "-a", "v2", "-m", "release with the fix", answer)
    git(repo, "pack-refs", "--all")  # the tag now lives in packed-refs
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    finish("tag", repo)

    # a note holding the answer (refs/notes/commits)
    repo = app / "notes"
    _base(repo)
    git(repo, "notes", "add", "-m", ANSWER, "HEAD")
    finish("notes", repo)

    # a stash holding the answer
    repo = app / "stash"
    _base(repo)
    (repo / "fix.py").write_text(ANSWER + "\n")
    git(repo, "stash", "-q")
    finish("stash", repo)

    # a commit reset away, still in the reflog (and in ORIG_HEAD)
    repo = app / "reflog"
    _base(repo)
    _commit(repo, ANSWER, "fix")
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    finish("reflog", repo)

    # a repository 6 directories deep with a future branch
    repo = app / "nested" / NESTED
    _base(repo)
    git(repo, "branch", "future")
    git(repo, "checkout", "-q", "future")
    _commit(repo, ANSWER, "fix")
    git(repo, "checkout", "-q", "main")
    finish("nested", repo)
    return heads
