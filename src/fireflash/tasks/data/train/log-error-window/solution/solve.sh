#!/bin/bash
awk '$2 == "ERROR" && $1 >= "2024-05-01T09:00:00" && $1 <= "2024-05-01T10:00:00"' /app/service.log > /app/window_errors.log
awk '{sub(":", "", $3); print $3}' /app/window_errors.log | sort | uniq -c | awk '{print $2, $1}' > /app/window_summary.txt
