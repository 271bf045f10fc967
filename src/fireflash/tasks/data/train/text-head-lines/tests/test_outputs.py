"""Checks for text-head-lines. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


LINES = (DATA / "notes.txt").read_text().splitlines()
COUNT = 5


def got():
    return (APP / "head.txt").read_text().splitlines()


def test_starts_with_first_line():
    assert got()[0] == LINES[0]


def test_ends_with_fifth_line():
    assert got()[-1] == LINES[COUNT - 1]


def test_exact_output():
    assert got() == LINES[:COUNT]
