#!/bin/bash
python3 - <<'EOF'
import json
def merge(a, b):
    out = dict(a)
    for key, value in b.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
base = json.load(open("/app/base.json"))
override = json.load(open("/app/override.json"))
json.dump(merge(base, override), open("/app/merged.json", "w"), indent=2)
EOF
