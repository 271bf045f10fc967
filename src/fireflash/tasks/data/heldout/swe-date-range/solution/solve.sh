#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/dates/ranges.py")
code = target.read_text()
code = code.replace('    while current < end:\n', '    while current <= end:\n')
target.write_text(code)
EOF
