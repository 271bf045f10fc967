"""Checks for git-init-commit. Expected values are computed from pristine copies of the inputs in /tests/data."""

import subprocess
from pathlib import Path

DATA = Path("/tests/data")


REPO = "/app/project"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=10, check=False).stdout


def test_single_commit_with_message():
    assert git("log", "--format=%s").splitlines() == ["Initial commit"]


def test_all_files_tracked_on_main():
    files = sorted(str(p.relative_to(DATA / "project")) for p in (DATA / "project").rglob("*") if p.is_file())
    assert sorted(git("ls-files").splitlines()) == files and git("rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_working_tree_clean():
    assert git("rev-parse", "HEAD").strip() and git("status", "--porcelain") == ""
