#!/bin/bash
sort /app/words.txt | uniq > /app/unique.txt
