"""Checks for file-make-dirs."""

from pathlib import Path

APP = Path("/app")


def test_src_dir():
    assert (APP / "project/src").is_dir()


def test_tests_dir():
    assert (APP / "project/tests").is_dir()


def test_docs_dir():
    assert (APP / "project/docs").is_dir()
