#!/bin/bash
cat > /app/.env <<'EOF'
APP_PORT=8080
APP_MODE=production
APP_DEBUG=false
EOF
