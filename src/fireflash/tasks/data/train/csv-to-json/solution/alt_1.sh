#!/bin/bash
echo '[' > /app/people.json
tail -n +2 /app/people.csv | awk -F, '{printf "%s{\"name\": \"%s\", \"age\": %d, \"city\": \"%s\"}", (NR>1?",\n":""), $1, $2, $3}' >> /app/people.json
printf '\n]\n' >> /app/people.json
