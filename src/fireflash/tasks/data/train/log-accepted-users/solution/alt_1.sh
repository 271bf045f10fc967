#!/bin/bash
sed -n 's/.*Accepted password for \([^ ]*\).*/\1/p' /app/auth.log | sort -u > /app/users.txt
