#!/bin/bash
awk '{print toupper($0)}' /app/shout.txt > /app/loud.txt
