"""Checks for swe-version-compare."""

from versions.compare import compare


def test_numeric_minor():
    assert compare("1.10", "1.9") == 1


def test_numeric_major():
    assert compare("2.0", "10.0") == -1


def test_missing_components_are_zero():
    assert compare("1.0.0", "1") == 0
