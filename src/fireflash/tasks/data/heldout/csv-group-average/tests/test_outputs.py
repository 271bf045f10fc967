"""Checks for csv-group-average. Expected values are computed from pristine copies of the inputs in /tests/data."""

import csv
from collections import defaultdict
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


SCORES = defaultdict(list)
with open(DATA / "results.csv") as f:
    for row in csv.DictReader(f):
        SCORES[row["team"]].append(float(row["score"]))
EXPECTED = ["team,average"] + [f"{t},{sum(v) / len(v):.2f}" for t, v in sorted(SCORES.items())]


def got():
    return (APP / "averages.csv").read_text().splitlines()


def test_header():
    assert got()[0] == EXPECTED[0] and len(got()) > 1


def test_averages_correct():
    assert set(got()[1:]) == set(EXPECTED[1:])


def test_sorted_by_team():
    assert got() == EXPECTED
