#!/bin/bash
tail -n 3 /app/notes.txt > /app/tail.txt
