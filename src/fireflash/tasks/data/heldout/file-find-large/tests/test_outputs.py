"""Checks for file-find-large. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


TREE = DATA / "data"
EXPECTED = sorted(str(p.relative_to(TREE)) for p in TREE.rglob("*") if p.is_file() and p.stat().st_size > 1024)


def listed():
    return (APP / "large.txt").read_text().split("\n")


def test_large_files_listed():
    assert set(EXPECTED) <= set(listed())


def test_no_small_files_listed():
    got = [line for line in listed() if line]
    assert got and not set(got) - set(EXPECTED)


def test_sorted_one_per_line():
    assert listed() == EXPECTED + [""]
