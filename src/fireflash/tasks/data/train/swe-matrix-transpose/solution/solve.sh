#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/matrix/ops.py")
code = target.read_text()
code = code.replace('for c in range(len(m))]\n', 'for c in range(len(m[0]) if m else 0)]\n')
target.write_text(code)
EOF
