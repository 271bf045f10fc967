#!/bin/bash
jq -r '.[] | select(.active) | .name' /app/users.json > /app/active.txt
