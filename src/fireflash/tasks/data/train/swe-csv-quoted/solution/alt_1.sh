#!/bin/bash
cat > /app/parsing/csvline.py <<'EOF'
import csv


def split_line(line):
    """Split one CSV line into fields; double quotes group a field that contains commas."""
    return next(csv.reader([line]))
EOF
