#!/bin/bash
cat > /app/greet.sh <<'EOF'
#!/bin/bash
echo "Hello, ${1:-World}!"
EOF
chmod +x /app/greet.sh
