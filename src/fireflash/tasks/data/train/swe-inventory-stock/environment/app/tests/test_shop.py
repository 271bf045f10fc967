import sys
sys.path.insert(0, '/app')
from shop.inventory import Inventory


def test_add_and_remove():
    inv = Inventory()
    inv.add("gear", 10)
    inv.remove("gear", 4)
    assert inv.stock["gear"] == 10 - 4


def test_remove_everything():
    inv = Inventory()
    inv.add("cog", 5)
    inv.remove("cog", 5)
    assert inv.stock["cog"] == 5 - 5
