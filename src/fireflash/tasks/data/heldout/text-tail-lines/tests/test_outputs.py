"""Checks for text-tail-lines. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


LINES = (DATA / "notes.txt").read_text().splitlines()
COUNT = 3


def got():
    return (APP / "tail.txt").read_text().splitlines()


def test_ends_with_last_line():
    assert got()[-1] == LINES[-1]


def test_starts_where_expected():
    assert got()[0] == LINES[-COUNT]


def test_exact_output():
    assert got() == LINES[-COUNT:]
