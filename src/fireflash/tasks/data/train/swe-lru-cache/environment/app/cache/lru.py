from collections import OrderedDict


class LRUCache:
    """Keeps at most `capacity` items, evicting the least recently used."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.items = OrderedDict()

    def get(self, key):
        return self.items.get(key)

    def put(self, key, value):
        self.items[key] = value
        self.items.move_to_end(key)
        if len(self.items) > self.capacity:
            self.items.popitem(last=False)
