"""Checks for text-count-lines. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


EXPECTED = len((DATA / "notes.txt").read_text().splitlines())


def got():
    return (APP / "count.txt").read_text()


def test_number_correct():
    assert int(got()) == EXPECTED


def test_only_the_number():
    assert got().strip() == str(EXPECTED)


def test_single_line():
    assert got().splitlines() == [str(EXPECTED)]
