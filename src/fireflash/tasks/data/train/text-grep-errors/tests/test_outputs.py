"""Checks for text-grep-errors. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


EXPECTED = [line for line in (DATA / "app.log").read_text().splitlines() if "ERROR" in line]


def got():
    return (APP / "errors.log").read_text().splitlines()


def test_all_error_lines_present():
    assert all(line in got() for line in EXPECTED)


def test_only_error_lines():
    lines = got()
    assert lines and all("ERROR" in line for line in lines)


def test_original_order():
    assert got() == EXPECTED
