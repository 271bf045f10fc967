"""Checks for swe-date-range."""

from datetime import date

from dates.ranges import date_range


def test_includes_end():
    assert date_range(date(2024, 1, 1), date(2024, 1, 3)) == [date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)]


def test_single_day():
    assert date_range(date(2024, 2, 29), date(2024, 2, 29)) == [date(2024, 2, 29)]


def test_across_month_end():
    days = date_range(date(2024, 1, 30), date(2024, 2, 2))
    assert days[-1] == date(2024, 2, 2) and len(days) == (date(2024, 2, 2) - date(2024, 1, 30)).days + 1
