#!/bin/bash
python3 - <<'EOF'
import tarfile
from pathlib import Path
with tarfile.open("/app/logs.tar.gz", "w:gz") as tar:
    for p in sorted(Path("/app/logs").glob("*.log")):
        tar.add(p, arcname=p.name)
EOF
