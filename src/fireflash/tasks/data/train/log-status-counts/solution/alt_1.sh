#!/bin/bash
python3 - <<'EOF'
from collections import Counter
counts = Counter(line.split()[-2] for line in open("/app/access.log") if line.strip())
open("/app/status_counts.txt", "w").write("".join(f"{c} {n}\n" for c, n in sorted(counts.items())))
EOF
