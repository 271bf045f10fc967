#!/bin/bash
mkdir -p /app/project && cd /app/project && mkdir src tests docs
