#!/bin/bash
tac /app/notes.txt > /app/reversed.txt
