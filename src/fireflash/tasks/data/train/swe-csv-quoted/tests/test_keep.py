"""Checks for swe-csv-quoted."""

from parsing.csvline import split_line


def test_plain_line():
    assert split_line("p,q,r") == "p,q,r".split(",")


def test_empty_fields():
    assert split_line("u,,v") == "u,,v".split(",")
