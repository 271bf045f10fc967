"""Checks for csv-sum-column. Expected values are computed from pristine copies of the inputs in /tests/data."""

import csv
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


with open(DATA / "sales.csv") as f:
    TOTAL = sum(float(row["amount"]) for row in csv.DictReader(f))


def got():
    return (APP / "total.txt").read_text()


def test_value_correct():
    assert abs(float(got()) - TOTAL) < 0.005


def test_two_decimals():
    text = got().strip()
    assert "." in text and len(text.split(".")[1]) == len("00") and abs(float(text) - TOTAL) < 0.005


def test_exact_output():
    assert got() == f"{TOTAL:.2f}\n"
