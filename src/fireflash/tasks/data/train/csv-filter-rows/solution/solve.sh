#!/bin/bash
awk -F, 'NR == 1 || $3 == "FR"' /app/customers.csv > /app/fr.csv
