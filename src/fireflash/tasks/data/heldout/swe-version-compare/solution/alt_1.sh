#!/bin/bash
cat > /app/versions/compare.py <<'EOF'
from itertools import zip_longest


def compare(a, b):
    """-1, 0 or 1 as version string a is lower than, equal to or higher than b."""
    for x, y in zip_longest(a.split("."), b.split("."), fillvalue="0"):
        if int(x) != int(y):
            return 1 if int(x) > int(y) else -1
    return 0
EOF
