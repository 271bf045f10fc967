"""Checks for python-low-stock-report. Expected values are computed from pristine copies of the inputs in /tests/data."""

import csv
import json
import subprocess
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


with open(DATA / "inventory.csv") as f:
    EXPECTED = sorted(r["sku"] for r in csv.DictReader(f) if int(r["stock"]) < int(r["reorder_level"]))


def test_report_file_correct():
    assert json.loads((APP / "low_stock.json").read_text()) == EXPECTED


def test_equal_stock_not_low():
    got = json.loads((APP / "low_stock.json").read_text())
    with open(DATA / "inventory.csv") as f:
        equal = [r["sku"] for r in csv.DictReader(f) if r["stock"] == r["reorder_level"]]
    assert got and not set(equal) & set(got)


def test_script_regenerates_report():
    (APP / "low_stock.json").unlink()
    subprocess.run(["python3", "/app/report.py"], capture_output=True, timeout=10, check=False)
    assert json.loads((APP / "low_stock.json").read_text()) == EXPECTED
