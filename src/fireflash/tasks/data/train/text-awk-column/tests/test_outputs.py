"""Checks for text-awk-column. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


EXPECTED = [line.split()[1] for line in (DATA / "scores.txt").read_text().splitlines()]


def got():
    return (APP / "names.txt").read_text().splitlines()


def test_first_name():
    assert got()[0] == EXPECTED[0]


def test_all_names_present():
    assert set(EXPECTED) <= set(got())


def test_exact_output():
    assert got() == EXPECTED
