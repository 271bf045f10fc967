#!/bin/bash
find /app/cache -type f -name '*.tmp' -delete
