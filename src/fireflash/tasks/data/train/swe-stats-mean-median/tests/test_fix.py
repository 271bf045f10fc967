"""Checks for swe-stats-mean-median."""

from stats.core import mean, median


def test_mean_of_empty_list():
    assert mean([]) == 0.0


def test_median_even_sorted():
    assert median([1, 2, 3, 4]) == 2.5


def test_median_even_unsorted():
    assert median([10, 2, 8, 4]) == 6.0
