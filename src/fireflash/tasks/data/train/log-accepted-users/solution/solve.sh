#!/bin/bash
grep -o 'Accepted password for [^ ]*' /app/auth.log | awk '{print $4}' | sort -u > /app/users.txt
