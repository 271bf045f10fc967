#!/bin/bash
awk '{a[NR] = $0} END {for (i = NR; i > 0; i--) print a[i]}' /app/notes.txt > /app/reversed.txt
