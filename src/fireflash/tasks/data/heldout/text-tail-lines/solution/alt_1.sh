#!/bin/bash
python3 -c "import sys; sys.stdout.writelines(open('/app/notes.txt').readlines()[-3:])" > /app/tail.txt
