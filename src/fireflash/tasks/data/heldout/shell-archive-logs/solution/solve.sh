#!/bin/bash
cd /app/logs && tar -czf /app/logs.tar.gz *.log
