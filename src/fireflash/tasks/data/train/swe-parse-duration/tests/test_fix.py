"""Checks for swe-parse-duration."""

from timeparse.duration import parse_duration


def test_hours_and_minutes():
    assert parse_duration("1h30m") == 5400


def test_all_units():
    assert parse_duration("2h5m10s") == 7510


def test_minutes_and_seconds():
    assert parse_duration("1m30s") == 90
