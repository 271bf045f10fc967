#!/bin/bash
cd /app/repo
git switch -q -c feature/login
printf 'def login(): return True\n' > login.py
git add -A && git commit -q -m "Add login"
