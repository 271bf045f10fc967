#!/bin/bash
head -n 5 /app/notes.txt > /app/head.txt
