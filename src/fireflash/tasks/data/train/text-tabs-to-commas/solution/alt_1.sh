#!/bin/bash
sed 's/\t/,/g' /app/data.tsv > /app/data.csv
