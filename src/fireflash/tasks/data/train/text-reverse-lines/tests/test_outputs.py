"""Checks for text-reverse-lines. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


LINES = (DATA / "notes.txt").read_text().splitlines()


def got():
    return (APP / "reversed.txt").read_text().splitlines()


def test_last_line_first():
    assert got()[0] == LINES[-1]


def test_first_line_last():
    assert got()[-1] == LINES[0]


def test_exact_output():
    assert got() == LINES[::-1]
