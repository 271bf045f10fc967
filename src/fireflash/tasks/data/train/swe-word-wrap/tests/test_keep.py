"""Checks for swe-word-wrap."""

from textkit.wrap import wrap


def test_keeps_all_words():
    text = "one two three four five six"
    assert " ".join(wrap(text, 10)) == text


def test_long_word_alone():
    assert wrap("supercalifragilistic", 5) == ["supercalifragilistic"]
