"""Checks for git-revert-commit."""

import subprocess
from pathlib import Path

APP = Path("/app")


REPO = "/app/calc"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=10, check=False).stdout


def test_file_restored_in_head():
    good = git("show", "HEAD~2:calc.py")
    assert good and git("show", "HEAD:calc.py") == good and (APP / "calc" / "calc.py").read_text() == good


def test_history_kept():
    subjects = git("log", "--format=%s").splitlines()
    assert subjects[1:] == ["Use subtraction", "Add multiply", "Add calculator"]


def test_clean_tree():
    assert len(git("log", "--format=%s").splitlines()) > 3 and git("status", "--porcelain") == ""
