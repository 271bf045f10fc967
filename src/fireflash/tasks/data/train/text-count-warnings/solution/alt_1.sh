#!/bin/bash
awk '/WARN/ {n++} END {print n + 0}' /app/app.log > /app/warn_count.txt
