"""Checks for swe-lru-cache."""

from cache.lru import LRUCache


def test_evicts_oldest_without_reads():
    c = LRUCache(1)
    c.put("p", 1)
    c.put("q", 2)
    assert c.get("p") is None


def test_missing_key_is_none():
    assert LRUCache(2).get("nope") is None
