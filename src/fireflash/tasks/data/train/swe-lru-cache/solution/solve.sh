#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/cache/lru.py")
code = target.read_text()
code = code.replace('    def get(self, key):\n        return self.items.get(key)\n', '    def get(self, key):\n        if key not in self.items:\n            return None\n        self.items.move_to_end(key)\n        return self.items[key]\n')
target.write_text(code)
EOF
