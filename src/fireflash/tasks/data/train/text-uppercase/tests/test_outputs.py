"""Checks for text-uppercase. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


SRC = (DATA / "shout.txt").read_text()


def got():
    return (APP / "loud.txt").read_text()


def test_first_line_upper():
    assert got().splitlines()[0] == SRC.splitlines()[0].upper()


def test_punctuation_and_digits_kept():
    assert got().splitlines()[2] == SRC.splitlines()[2].upper()


def test_exact_output():
    assert got() == SRC.upper()
