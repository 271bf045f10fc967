#!/bin/bash
cat > /app/count_lines.sh <<'EOF'
#!/bin/bash
total=0
for f in "$1"/*.txt; do
  [ -f "$f" ] || continue
  total=$((total + $(wc -l < "$f")))
done
echo "$total"
EOF
chmod +x /app/count_lines.sh
