#!/bin/bash
cat > /app/stats.py <<'EOF'
import json
import sys

with open(sys.argv[1]) as handle:
    xs = sorted(float(x) for x in handle.read().split())
n = len(xs)
middle = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
print(json.dumps({"count": n, "mean": round(sum(xs) / n, 2), "median": round(middle, 2), "max": xs[-1]}))
EOF
