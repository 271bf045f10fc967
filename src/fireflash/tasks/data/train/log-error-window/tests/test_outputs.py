"""Checks for log-error-window. Expected values are computed from pristine copies of the inputs in /tests/data."""

from collections import Counter
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


START, END, LEVEL = "2024-05-01T09:00:00", "2024-05-01T10:00:00", "ERROR"
LINES = (DATA / "service.log").read_text().splitlines()
WINDOW = [l for l in LINES if l.split()[1] == LEVEL and START <= l.split()[0] <= END]
SUMMARY = [f"{c} {n}" for c, n in sorted(Counter(l.split()[2].rstrip(":") for l in WINDOW).items())]


def test_window_errors_exact():
    assert (APP / "window_errors.log").read_text().splitlines() == WINDOW


def test_boundaries_included():
    got = (APP / "window_errors.log").read_text().splitlines()
    assert [l for l in WINDOW if l.startswith(END)] and all(l in got for l in WINDOW if l.startswith(END))


def test_summary_exact():
    assert (APP / "window_summary.txt").read_text().splitlines() == SUMMARY
