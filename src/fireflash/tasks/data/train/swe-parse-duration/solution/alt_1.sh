#!/bin/bash
cat > /app/timeparse/duration.py <<'EOF'
import re

UNITS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text):
    """'1h30m' -> seconds."""
    total, matched = 0, False
    for number, unit in re.findall(r"(\d+)([hms])", text):
        total += int(number) * UNITS[unit]
        matched = True
    if not matched:
        raise ValueError(f"not a duration: {text!r}")
    return total
EOF
