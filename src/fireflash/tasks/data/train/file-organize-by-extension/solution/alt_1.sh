#!/bin/bash
cd /app/inbox && mkdir -p txt csv log
find . -maxdepth 1 -type f -name '*.*' | while read -r f; do mv "$f" "${f##*.}/"; done
