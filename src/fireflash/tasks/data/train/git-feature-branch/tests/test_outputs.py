"""Checks for git-feature-branch."""

import subprocess


REPO = "/app/repo"
BRANCH = "feature/login"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=10, check=False).stdout.strip()


def test_branch_starts_at_main():
    assert git("rev-parse", BRANCH + "~1") and git("rev-parse", BRANCH + "~1") == git("rev-parse", "main")


def test_login_file_committed():
    assert git("show", BRANCH + ":login.py") == "def login(): return True"


def test_commit_message_and_main_untouched():
    assert git("log", "-1", "--format=%s", BRANCH) == "Add login"
    assert git("show", "main:login.py") == "" and git("log", "--format=%s", "main").splitlines()
