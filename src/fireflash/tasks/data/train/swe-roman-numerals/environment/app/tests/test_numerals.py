import sys
sys.path.insert(0, '/app')
from numerals.roman import to_roman


def test_additive_numbers():
    assert to_roman(8) == "V" + "I" * 3 and to_roman(30) == "X" * 3


def test_thousands():
    assert to_roman(2000) == "M" * 2
