#!/bin/bash
sed -i 's/while current < end:/while current <= end:/' /app/dates/ranges.py
