"""Checks for text-word-frequency. Expected values are computed from pristine copies of the inputs in /tests/data."""

from collections import Counter
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


COUNTS = Counter((DATA / "story.txt").read_text().split())
EXPECTED = [f"{w} {c}" for w, c in sorted(COUNTS.items(), key=lambda kv: (-kv[1], kv[0]))[:3]]


def got():
    return (APP / "top.txt").read_text().splitlines()


def test_most_frequent_first():
    assert got()[0] == EXPECTED[0]


def test_top_three_words():
    assert [l.split()[0] for l in got()] == [e.split()[0] for e in EXPECTED]


def test_exact_output():
    assert got() == EXPECTED
