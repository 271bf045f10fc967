#!/bin/bash
sed -i 's/len(word) > width + 1:/len(word) > width:/' /app/textkit/wrap.py
