"""Checks for text-count-warnings. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


LEVEL = "WARN"
EXPECTED = sum(LEVEL in line for line in (DATA / "app.log").read_text().splitlines())


def got():
    return (APP / "warn_count.txt").read_text()


def test_count_correct():
    assert int(got()) == EXPECTED


def test_only_the_number():
    assert got().strip() == str(EXPECTED)


def test_single_line():
    assert got().splitlines() == [str(EXPECTED)]
