"""Checks for swe-inventory-stock."""

from shop.inventory import Inventory


def test_overdraw_raises_value_error():
    inv = Inventory()
    inv.add("bolt", 3)
    try:
        inv.remove("bolt", 5)
    except ValueError:
        return
    raise AssertionError("no ValueError")


def test_overdraw_leaves_stock():
    inv = Inventory()
    start = 2
    inv.add("nut", start)
    try:
        inv.remove("nut", start + 7)
    except ValueError:
        pass
    assert inv.stock["nut"] == start


def test_unknown_item_raises_key_error():
    try:
        Inventory().remove("ghost", 1)
    except KeyError:
        return
    raise AssertionError("no KeyError")
