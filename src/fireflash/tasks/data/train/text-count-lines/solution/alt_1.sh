#!/bin/bash
awk 'END {print NR}' /app/notes.txt > /app/count.txt
