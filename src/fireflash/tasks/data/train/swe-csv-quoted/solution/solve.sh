#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/parsing/csvline.py")
code = target.read_text()
code = code.replace('    return [field.strip(\'"\') for field in line.split(",")]\n', '    fields, current, quoted = [], "", False\n    for ch in line:\n        if ch == \'"\':\n            quoted = not quoted\n        elif ch == "," and not quoted:\n            fields.append(current)\n            current = ""\n        else:\n            current += ch\n    fields.append(current)\n    return fields\n')
target.write_text(code)
EOF
