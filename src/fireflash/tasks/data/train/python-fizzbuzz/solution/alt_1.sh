#!/bin/bash
cat > /app/fizzbuzz.py <<'EOF'
import sys


def label(i):
    words = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
    return words or str(i)


if __name__ == "__main__":
    print("\n".join(label(i) for i in range(1, int(sys.argv[1]) + 1)))
EOF
