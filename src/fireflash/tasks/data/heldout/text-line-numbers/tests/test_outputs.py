"""Checks for text-line-numbers. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


LINES = (DATA / "poem.txt").read_text().splitlines()
EXPECTED = [f"{i}: {line}" for i, line in enumerate(LINES, 1)]


def got():
    return (APP / "numbered.txt").read_text().splitlines()


def test_first_line_numbered():
    assert got()[0] == EXPECTED[0]


def test_last_line_numbered():
    assert got()[-1] == EXPECTED[-1]


def test_exact_output():
    assert got() == EXPECTED
