#!/bin/bash
cat > /app/stats.py <<'EOF'
import json, statistics, sys
values = [float(line) for line in open(sys.argv[1]) if line.strip()]
print(json.dumps({"count": len(values), "mean": round(statistics.mean(values), 2),
                  "median": round(statistics.median(values), 2), "max": max(values)}))
EOF
