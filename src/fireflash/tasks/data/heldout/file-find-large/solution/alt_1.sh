#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
root = Path("/app/data")
big = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.stat().st_size > 1024)
Path("/app/large.txt").write_text("".join(line + "\n" for line in big))
EOF
