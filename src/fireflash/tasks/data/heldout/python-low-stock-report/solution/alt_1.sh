#!/bin/bash
cat > /app/report.py <<'EOF'
import csv
import json

with open("/app/inventory.csv", newline="") as f:
    low = [row["sku"] for row in csv.DictReader(f) if float(row["stock"]) < float(row["reorder_level"])]
with open("/app/low_stock.json", "w") as f:
    f.write(json.dumps(sorted(low)) + "\n")
EOF
python3 /app/report.py
