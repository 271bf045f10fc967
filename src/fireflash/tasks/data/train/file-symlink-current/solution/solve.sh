#!/bin/bash
ln -s /app/releases/v2 /app/current
