"""Checks for file-delete-tmp. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


TREE = DATA / "cache"
DIRS = sorted({p.parent for p in TREE.rglob("*") if p.is_file()}, key=lambda d: len(d.parts))


def check(directory):
    for p in sorted(directory.iterdir()):
        if p.is_file():
            target = APP / "cache" / p.relative_to(TREE)
            if p.suffix == ".tmp":
                assert not target.exists()
            else:
                assert target.read_text() == p.read_text()


def test_top_level_cleaned():
    check(DIRS[0])


def test_subdirectory_cleaned():
    check(DIRS[1])


def test_nested_subdirectory_cleaned():
    check(DIRS[2])
