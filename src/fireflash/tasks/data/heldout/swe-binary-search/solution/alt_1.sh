#!/bin/bash
cat > /app/algos/search.py <<'EOF'
import bisect


def binary_search(items, target):
    """Index of target in the sorted list items, or -1 when absent."""
    i = bisect.bisect_left(items, target)
    return i if i < len(items) and items[i] == target else -1
EOF
