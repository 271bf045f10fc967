#!/bin/bash
find /app/cache -name '*.tmp' -type f -exec rm -f {} +
