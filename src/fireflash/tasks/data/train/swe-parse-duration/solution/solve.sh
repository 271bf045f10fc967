#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/timeparse/duration.py")
code = target.read_text()
code = code.replace('    for number, unit in re.findall(r"(\\d+)([hms])", text):\n        return int(number) * UNITS[unit]\n', '    parts = re.findall(r"(\\d+)([hms])", text)\n    if parts:\n        return sum(int(number) * UNITS[unit] for number, unit in parts)\n')
target.write_text(code)
EOF
