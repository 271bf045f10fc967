"""Checks for swe-csv-quoted."""

from parsing.csvline import split_line


def test_quoted_comma_middle():
    assert split_line('a,"b,c",d') == ["a", "b,c", "d"]


def test_quoted_comma_first():
    assert split_line('"x, y",z') == ["x, y", "z"]


def test_two_quoted_fields():
    assert split_line('"1,2","3,4"') == ["1,2", "3,4"]
