#!/bin/bash
chmod 755 /app/bin/build.sh /app/bin/deploy.sh /app/bin/clean.sh
