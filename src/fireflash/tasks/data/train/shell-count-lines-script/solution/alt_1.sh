#!/bin/bash
cat > /app/count_lines.sh <<'EOF'
#!/bin/bash
find "$1" -maxdepth 1 -type f -name '*.txt' -exec cat {} + 2>/dev/null | wc -l
EOF
chmod +x /app/count_lines.sh
