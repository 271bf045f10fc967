#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
module = Path("/app/shop/inventory.py")
code = module.read_text().replace(
    "        self.stock[sku] = self.stock.get(sku, 0) - qty\n",
    "        left = self.stock[sku] - qty\n        if left < 0:\n            raise ValueError(sku)\n        self.stock[sku] = left\n")
module.write_text(code)
EOF
