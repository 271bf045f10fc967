#!/bin/bash
grep -n '' /app/poem.txt | sed 's/:/: /' > /app/numbered.txt
