"""Checks for swe-slugify."""

from textkit.slug import slugify


def test_plain_word_unchanged():
    assert slugify("simple") == "simple"


def test_lowercases():
    assert slugify("ABC") == "ABC".lower()
