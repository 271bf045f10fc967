"""Checks for file-copy-backup. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


SRC = DATA / "app.conf"


def backup():
    return (APP / "backup/app.conf").read_bytes()


def test_backup_is_identical():
    assert backup() == SRC.read_bytes()


def test_backup_has_every_setting():
    lines = backup().decode().splitlines()
    assert all(line in lines for line in SRC.read_text().splitlines())


def test_backup_starts_with_first_section():
    assert backup().decode().splitlines()[0] == SRC.read_text().splitlines()[0]
