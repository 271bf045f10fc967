#!/bin/bash
cat > /app/numerals/roman.py <<'EOF'
DIGITS = [("", "M", "MM", "MMM"),
          ("", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM"),
          ("", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"),
          ("", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX")]


def to_roman(n):
    return "".join(table[n // 10 ** (3 - i) % 10] for i, table in enumerate(DIGITS))
EOF
