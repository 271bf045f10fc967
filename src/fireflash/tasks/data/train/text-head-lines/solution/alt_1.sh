#!/bin/bash
sed -n '1,5p' /app/notes.txt > /app/head.txt
