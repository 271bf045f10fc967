"""Checks for swe-slugify."""

from textkit.slug import slugify


def test_collapses_separators():
    assert slugify("Hello  World!") == "hello-world"


def test_strips_outer_dashes():
    assert slugify("  Rust & Go  ") == "rust-go"


def test_already_slugged():
    assert slugify("--Already-Slugged--") == "already-slugged"
