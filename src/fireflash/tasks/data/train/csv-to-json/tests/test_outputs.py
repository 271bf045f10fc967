"""Checks for csv-to-json. Expected values are computed from pristine copies of the inputs in /tests/data."""

import csv
import json
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


with open(DATA / "people.csv") as f:
    ROWS = list(csv.DictReader(f))


def got():
    return json.loads((APP / "people.json").read_text())


def test_one_object_per_row():
    data = got()
    assert isinstance(data, list) and [d["name"] for d in data] == [r["name"] for r in ROWS]


def test_age_is_integer():
    data = got()
    assert data and all(type(d["age"]) is int for d in data)
    assert [d["age"] for d in data] == [int(r["age"]) for r in ROWS]


def test_exact_objects():
    assert got() == [{"name": r["name"], "age": int(r["age"]), "city": r["city"]} for r in ROWS]
