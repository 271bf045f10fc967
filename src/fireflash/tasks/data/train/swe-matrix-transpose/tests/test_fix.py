"""Checks for swe-matrix-transpose."""

from matrix.ops import transpose


def test_wide_matrix():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


def test_tall_matrix():
    assert transpose([[7], [8]]) == [[7, 8]]


def test_single_row():
    assert transpose([[1, 2]]) == [[1], [2]]
