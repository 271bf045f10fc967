"""Checks for log-top-ips. Expected values are computed from pristine copies of the inputs in /tests/data."""

from collections import Counter
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


COUNTS = Counter(line.split()[0] for line in (DATA / "access.log").read_text().splitlines())
EXPECTED = [ip for ip, _ in sorted(COUNTS.items(), key=lambda kv: (-kv[1], kv[0]))[:3]]


def got():
    return (APP / "top_ips.txt").read_text().splitlines()


def test_busiest_ip_first():
    assert got()[0] == EXPECTED[0]


def test_top_three_set():
    assert set(got()) == set(EXPECTED)


def test_exact_output():
    assert got() == EXPECTED
