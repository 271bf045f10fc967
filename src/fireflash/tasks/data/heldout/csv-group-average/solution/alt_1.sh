#!/bin/bash
{ echo team,average; awk -F, 'NR > 1 {s[$2] += $3; n[$2]++} END {for (t in s) printf "%s,%.2f\n", t, s[t] / n[t]}' /app/results.csv | sort; } > /app/averages.csv
