"""Checks for json-merge-configs. Expected values are computed from pristine copies of the inputs in /tests/data."""

import json
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


def merge(a, b):
    out = dict(a)
    for key, value in b.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


EXPECTED = merge(json.loads((DATA / "base.json").read_text()), json.loads((DATA / "override.json").read_text()))


def got():
    return json.loads((APP / "merged.json").read_text())


def test_overridden_values_win():
    assert got()["server"]["port"] == EXPECTED["server"]["port"]


def test_nested_objects_merged():
    assert got()["server"] == EXPECTED["server"] and got()["features"] == EXPECTED["features"]


def test_exact_result():
    assert got() == EXPECTED
