#!/bin/bash
python3 - <<'EOF'
from pathlib import Path
target = Path("/app/numerals/roman.py")
code = target.read_text()
code = code.replace('SYMBOLS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]\n', 'SYMBOLS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"),\n           (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]\n')
target.write_text(code)
EOF
