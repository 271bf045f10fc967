#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/shop/inventory.py")
code = target.read_text()
code = code.replace('    def remove(self, sku, qty):\n        self.stock[sku] = self.stock.get(sku, 0) - qty\n', '    def remove(self, sku, qty):\n        if sku not in self.stock:\n            raise KeyError(sku)\n        if qty > self.stock[sku]:\n            raise ValueError(f"only {self.stock[sku]} of {sku} in stock")\n        self.stock[sku] -= qty\n')
target.write_text(code)
EOF
