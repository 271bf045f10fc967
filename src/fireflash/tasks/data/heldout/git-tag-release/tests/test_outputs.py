"""Checks for git-tag-release."""

import subprocess


REPO, TAG = "/app/service", "v1.0.0"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=10, check=False).stdout.strip()


def test_tag_points_at_head():
    assert git("rev-parse", TAG + "^{commit}") and git("rev-parse", TAG + "^{commit}") == git("rev-parse", "HEAD")


def test_tag_is_annotated():
    assert git("cat-file", "-t", TAG) == "tag"


def test_tag_message():
    assert git("tag", "-l", "--format=%(contents:subject)", TAG) == "Release 1.0.0"
