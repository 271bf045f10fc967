#!/bin/bash
cd /app/repo
git checkout -q -b feature/login main
echo 'def login(): return True' > login.py
git add login.py && git commit -qm "Add login"
