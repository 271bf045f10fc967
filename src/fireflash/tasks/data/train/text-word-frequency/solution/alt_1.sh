#!/bin/bash
python3 - <<'EOF'
from collections import Counter
counts = Counter(open("/app/story.txt").read().split())
top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
open("/app/top.txt", "w").write("".join(f"{w} {c}\n" for w, c in top))
EOF
