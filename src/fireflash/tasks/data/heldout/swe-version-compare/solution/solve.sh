#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/versions/compare.py")
code = target.read_text()
code = code.replace('    pa, pb = a.split("."), b.split(".")\n', '    pa, pb = [int(x) for x in a.split(".")], [int(x) for x in b.split(".")]\n    width = max(len(pa), len(pb))\n    pa, pb = pa + [0] * (width - len(pa)), pb + [0] * (width - len(pb))\n')
target.write_text(code)
EOF
