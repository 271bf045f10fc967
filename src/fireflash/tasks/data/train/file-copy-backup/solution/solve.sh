#!/bin/bash
mkdir -p /app/backup && cp /app/config/app.conf /app/backup/app.conf
