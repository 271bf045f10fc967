#!/bin/bash
printf 'APP_PORT=8080\nAPP_MODE=production\nAPP_DEBUG=false\n' > /app/.env
