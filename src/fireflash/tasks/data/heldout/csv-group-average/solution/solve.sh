#!/bin/bash
python3 - <<'EOF'
import csv
from collections import defaultdict
scores = defaultdict(list)
for row in csv.DictReader(open("/app/results.csv")):
    scores[row["team"]].append(float(row["score"]))
with open("/app/averages.csv", "w") as f:
    f.write("team,average\n")
    for team in sorted(scores):
        f.write(f"{team},{sum(scores[team]) / len(scores[team]):.2f}\n")
EOF
