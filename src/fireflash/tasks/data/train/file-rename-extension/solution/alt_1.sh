#!/bin/bash
cd /app/photos
rename_all() { for f in *.jpeg; do mv -- "$f" "$(basename "$f" .jpeg).jpg"; done; }
rename_all
