"""Checks for text-tabs-to-commas. Expected values are computed from pristine copies of the inputs in /tests/data."""

from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


SRC = (DATA / "data.tsv").read_text()
TAB, COMMA = "\t", ","


def got():
    return (APP / "data.csv").read_text()


def test_header_converted():
    assert got().splitlines()[0] == SRC.splitlines()[0].replace(TAB, COMMA)


def test_no_tabs_left():
    assert got() and TAB not in got() and len(got().splitlines()) == len(SRC.splitlines())


def test_exact_output():
    assert got() == SRC.replace(TAB, COMMA)
