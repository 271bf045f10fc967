"""Checks for json-active-users. Expected values are computed from pristine copies of the inputs in /tests/data."""

import json
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


USERS = json.loads((DATA / "users.json").read_text())
EXPECTED = [u["name"] for u in USERS if u["active"]]


def got():
    return (APP / "active.txt").read_text().splitlines()


def test_active_users_listed():
    assert set(EXPECTED) <= set(got())


def test_no_inactive_users():
    inactive = {u["name"] for u in USERS if not u["active"]}
    assert got() and set(got()) <= set(EXPECTED) and not inactive & set(got())


def test_exact_output():
    assert got() == EXPECTED
