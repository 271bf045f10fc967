"""Checks for file-organize-by-extension. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


INBOX = APP / "inbox"


def moved(ext):
    names = sorted(p.name for p in DATA.glob(f"*.{ext}"))
    assert names
    for name in names:
        assert not (INBOX / name).exists()
        assert (INBOX / ext / name).read_text() == (DATA / name).read_text()


def test_txt_files_moved():
    moved("txt")


def test_csv_files_moved():
    moved("csv")


def test_log_files_moved():
    moved("log")
