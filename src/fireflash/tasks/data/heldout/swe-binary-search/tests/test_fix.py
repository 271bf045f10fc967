"""Checks for swe-binary-search."""

from algos.search import binary_search


def test_missing_value():
    assert binary_search([1, 3, 5, 7], 4) == -1


def test_beyond_last():
    assert binary_search([1, 3, 5, 7], 99) == -1


def test_empty_list():
    assert binary_search([], 3) == -1
