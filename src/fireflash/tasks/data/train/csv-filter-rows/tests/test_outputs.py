"""Checks for csv-filter-rows. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


LINES = (DATA / "customers.csv").read_text().splitlines()
WANTED = "FR"
EXPECTED = [LINES[0]] + [l for l in LINES[1:] if l.split(",")[2] == WANTED]


def got():
    return (APP / "fr.csv").read_text().splitlines()


def test_header_first():
    assert got()[0] == LINES[0] and len(got()) > 1


def test_only_matching_rows():
    rows = got()[1:]
    assert rows and all(r.split(",")[2] == WANTED for r in rows)


def test_exact_output():
    assert got() == EXPECTED
