#!/bin/bash
awk '{print NR ": " $0}' /app/poem.txt > /app/numbered.txt
