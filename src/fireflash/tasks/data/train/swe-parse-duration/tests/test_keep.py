"""Checks for swe-parse-duration."""

from timeparse.duration import parse_duration


def test_single_component():
    assert parse_duration("45s") == int("45")


def test_rejects_garbage():
    try:
        parse_duration("soon")
    except ValueError:
        return
    raise AssertionError("no ValueError")
