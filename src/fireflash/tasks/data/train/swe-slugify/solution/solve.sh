#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/textkit/slug.py")
code = target.read_text()
code = code.replace('    return re.sub(r"[^a-z0-9]", "-", text)\n', '    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")\n')
target.write_text(code)
EOF
