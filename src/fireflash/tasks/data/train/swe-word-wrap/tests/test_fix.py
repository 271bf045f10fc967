"""Checks for swe-word-wrap."""

from textkit.wrap import wrap


def test_example_eight():
    assert wrap("the quick brown fox", 8) == ["the", "quick", "brown", "fox"]


def test_example_four():
    assert wrap("aa bb cc", 4) == ["aa", "bb", "cc"]


def test_never_too_long():
    text = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do"
    for width in range(11, 30):
        assert all(len(line) <= width for line in wrap(text, width))
