#!/bin/bash
cut -d' ' -f2 /app/scores.txt > /app/names.txt
