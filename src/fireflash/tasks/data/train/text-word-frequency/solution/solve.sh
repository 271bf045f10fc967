#!/bin/bash
tr -s ' ' '\n' < /app/story.txt | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | head -3 | awk '{print $2, $1}' > /app/top.txt
