"""Checks for log-status-counts. Expected values are computed from pristine copies of the inputs in /tests/data."""

from collections import Counter
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


COUNTS = Counter(line.split()[-2] for line in (DATA / "access.log").read_text().splitlines())
EXPECTED = [f"{code} {n}" for code, n in sorted(COUNTS.items())]


def got():
    return (APP / "status_counts.txt").read_text().splitlines()


def test_most_common_code_counted():
    code, n = COUNTS.most_common(1)[0]
    assert f"{code} {n}" in got()


def test_every_code_present():
    assert set(got()) == set(EXPECTED)


def test_sorted_by_code():
    assert got() == EXPECTED
