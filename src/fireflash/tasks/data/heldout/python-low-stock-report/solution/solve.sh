#!/bin/bash
cat > /app/report.py <<'EOF'
import csv, json
rows = csv.DictReader(open("/app/inventory.csv"))
low = sorted(r["sku"] for r in rows if int(r["stock"]) < int(r["reorder_level"]))
json.dump(low, open("/app/low_stock.json", "w"))
EOF
python3 /app/report.py
