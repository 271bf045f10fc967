"""Checks for text-sort-unique. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


EXPECTED = sorted(set((DATA / "words.txt").read_text().split()))


def got():
    return (APP / "unique.txt").read_text().splitlines()


def test_every_word_present():
    assert set(got()) == set(EXPECTED)


def test_no_duplicates():
    lines = got()
    assert lines and len(lines) == len(set(lines)) and set(lines) <= set(EXPECTED)


def test_sorted():
    assert got() == EXPECTED
