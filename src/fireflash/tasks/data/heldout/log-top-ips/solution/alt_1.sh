#!/bin/bash
python3 - <<'EOF'
from collections import Counter
c = Counter(l.split()[0] for l in open("/app/access.log") if l.strip())
top = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
open("/app/top_ips.txt", "w").write("".join(ip + "\n" for ip, _ in top))
EOF
