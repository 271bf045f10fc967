"""Checks for file-symlink-current."""

import os
from pathlib import Path

APP = Path("/app")


def test_is_symlink():
    assert os.path.islink(APP / "current") and (APP / "current").is_dir()


def test_points_at_v2():
    assert (APP / "current").resolve() == (APP / "releases/v2").resolve()


def test_reads_through_link():
    assert (APP / "current" / "VERSION").read_text() == (APP / "releases/v2" / "VERSION").read_text()
