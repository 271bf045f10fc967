#!/bin/bash
cd /app/inbox
for ext in txt csv log; do mkdir -p "$ext"; mv ./*."$ext" "$ext"/; done
