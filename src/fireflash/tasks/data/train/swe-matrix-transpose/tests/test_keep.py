"""Checks for swe-matrix-transpose."""

from matrix.ops import identity, transpose


def test_square_matrix():
    m = [[1, 2], [3, 4]]
    assert transpose(m) == [list(col) for col in zip(*m)]


def test_identity_symmetric():
    assert transpose(identity(3)) == identity(3)


def test_empty_matrix():
    assert transpose([]) == []
