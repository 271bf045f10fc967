#!/bin/bash
tr '\t' ',' < /app/data.tsv > /app/data.csv
