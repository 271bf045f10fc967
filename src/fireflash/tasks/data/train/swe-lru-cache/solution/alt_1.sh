#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
module = Path("/app/cache/lru.py")
code = module.read_text().replace(
    "        return self.items.get(key)\n",
    "        value = self.items.pop(key, None)\n        if value is not None:\n            self.items[key] = value\n        return value\n")
module.write_text(code)
EOF
