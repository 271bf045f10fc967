#!/bin/bash
tr '[:lower:]' '[:upper:]' < /app/shout.txt > /app/loud.txt
