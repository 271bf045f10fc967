"""Checks for text-sed-replace. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


ORIGINAL = (DATA / "settings.ini").read_text()
OLD, NEW = "localhost", "db.internal"


def got():
    return (APP / "settings.ini").read_text()


def test_database_urls_replaced():
    lines = got().splitlines()
    assert [l for l in lines if l.startswith("url") or l.startswith("replica")] == [
        l.replace(OLD, NEW) for l in ORIGINAL.splitlines() if l.startswith("url") or l.startswith("replica")]


def test_cache_host_replaced():
    assert ORIGINAL.splitlines()[5].replace(OLD, NEW) in got().splitlines()


def test_rest_unchanged():
    assert got() == ORIGINAL.replace(OLD, NEW)
