import sys
sys.path.insert(0, '/app')
from algos.search import binary_search


def test_finds_each_element():
    items = [2, 4, 6, 8, 10]
    assert [binary_search(items, x) for x in items] == list(range(len(items)))


def test_finds_first():
    assert binary_search([5, 6], 5) == [5, 6].index(5)
