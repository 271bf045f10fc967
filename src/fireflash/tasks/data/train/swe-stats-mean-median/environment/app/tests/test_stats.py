import sys
sys.path.insert(0, '/app')
from stats.core import mean, median


def test_mean_of_values():
    assert mean([2, 4, 9]) == (2 + 4 + 9) / len([2, 4, 9])


def test_median_odd():
    assert median([7, 1, 5]) == sorted([7, 1, 5])[len([7, 1, 5]) // 2]
