"""Checks for swe-date-range."""

from datetime import date

from dates.ranges import date_range


def test_reversed_is_empty():
    assert date_range(date(2024, 3, 5), date(2024, 3, 1)) == []


def test_starts_at_start():
    assert date_range(date(2024, 5, 1), date(2024, 5, 9))[0] == date(2024, 5, 1)
