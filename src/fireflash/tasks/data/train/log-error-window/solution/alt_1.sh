#!/bin/bash
python3 - <<'EOF'
from collections import Counter
lines = [l.rstrip("\n") for l in open("/app/service.log")]
hits = [l for l in lines if l.split()[1] == "ERROR" and "2024-05-01T09:00:00" <= l.split()[0] <= "2024-05-01T10:00:00"]
open("/app/window_errors.log", "w").write("".join(h + "\n" for h in hits))
counts = Counter(h.split()[2].rstrip(":") for h in hits)
open("/app/window_summary.txt", "w").write("".join(f"{c} {n}\n" for c, n in sorted(counts.items())))
EOF
