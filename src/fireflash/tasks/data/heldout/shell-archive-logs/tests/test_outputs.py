"""Checks for shell-archive-logs. Expected values are computed from pristine copies of the inputs in /tests/data."""

import tarfile
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


LOGS = {p.name: p.read_bytes() for p in (DATA / "logs").glob("*.log")}


def members():
    with tarfile.open(APP / "logs.tar.gz", "r:gz") as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_all_logs_archived():
    assert set(LOGS) <= set(members())


def test_no_other_files():
    got = members()
    assert got and set(got) <= set(LOGS)


def test_contents_match():
    assert members() == LOGS
