#!/bin/bash
awk '{print $2}' /app/scores.txt > /app/names.txt
