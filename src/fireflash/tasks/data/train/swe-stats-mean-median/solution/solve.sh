#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/stats/core.py")
code = target.read_text()
code = code.replace('    return total / len(values)\n', '    return total / len(values) if values else 0.0\n')
code = code.replace('    return ordered[len(ordered) // 2]\n', '    mid = len(ordered) // 2\n    if len(ordered) % 2 == 0:\n        return (ordered[mid - 1] + ordered[mid]) / 2\n    return ordered[mid]\n')
target.write_text(code)
EOF
