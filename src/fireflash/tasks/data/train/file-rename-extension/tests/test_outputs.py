"""Checks for file-rename-extension. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


PHOTOS = APP / "photos"
NAMES = ["beach", "city", "forest"]


def check(name):
    assert not (PHOTOS / f"{name}.jpeg").exists()
    assert (PHOTOS / f"{name}.jpg").read_text() == f"JPEGDATA-{name}\n"


def test_beach_renamed():
    check(NAMES[0])


def test_city_renamed():
    check(NAMES[1])


def test_forest_renamed():
    check(NAMES[2])
