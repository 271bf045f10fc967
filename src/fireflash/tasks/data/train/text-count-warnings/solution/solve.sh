#!/bin/bash
grep -c WARN /app/app.log > /app/warn_count.txt
