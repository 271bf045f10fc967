#!/bin/bash
mkdir -p /app/backup
cat /app/config/app.conf > /app/backup/app.conf
