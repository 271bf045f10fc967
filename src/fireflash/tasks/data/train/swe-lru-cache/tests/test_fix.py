"""Checks for swe-lru-cache."""

from cache.lru import LRUCache


def test_get_protects_from_eviction():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    c.put("c", 3)
    assert c.get("a") == 1 and c.get("b") is None


def test_repeated_reads():
    c = LRUCache(3)
    for k in "xyz":
        c.put(k, k.upper())
    c.get("x")
    c.get("y")
    c.put("w", "W")
    assert c.get("z") is None and c.get("x") == "x".upper()


def test_order_after_get():
    c = LRUCache(2)
    keys = ["k1", "k2", "k3"]
    for i, k in enumerate(keys[:2]):
        c.put(k, i)
    c.get(keys[0])
    c.put(keys[2], 2)
    assert list(c.items) == [keys[0], keys[2]]
