#!/bin/bash
sed -i 's/\[^a-z0-9\]", "-", text)/[^a-z0-9]+", "-", text).strip("-")/' /app/textkit/slug.py
