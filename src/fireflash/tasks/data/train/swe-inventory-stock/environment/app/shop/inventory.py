class Inventory:
    def __init__(self):
        self.stock = {}

    def add(self, sku, qty):
        self.stock[sku] = self.stock.get(sku, 0) + qty

    def remove(self, sku, qty):
        self.stock[sku] = self.stock.get(sku, 0) - qty
