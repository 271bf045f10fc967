#!/bin/bash
cd /app/project
git init -q
git checkout -q -b main
git add .
git commit -q -m "Initial commit"
