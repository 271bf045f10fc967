#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/textkit/wrap.py")
code = target.read_text()
code = code.replace('len(line) + 1 + len(word) > width + 1:', 'len(line) + 1 + len(word) > width:')
target.write_text(code)
EOF
