"""Checks for log-accepted-users. Expected values are computed from pristine copies of the inputs in /tests/data."""

import re
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


USERS = sorted(set(re.findall(r"Accepted password for (\S+)", (DATA / "auth.log").read_text())))


def got():
    return (APP / "users.txt").read_text().splitlines()


def test_successful_users_listed():
    assert set(USERS) <= set(got())


def test_failed_logins_excluded():
    failed = set(re.findall(r"Failed password for (\S+)", (DATA / "auth.log").read_text()))
    assert got() and set(got()) <= set(USERS) and not failed & set(got())


def test_sorted_unique():
    assert got() == USERS
