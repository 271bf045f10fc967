#!/bin/bash
jq -s '.[0] * .[1]' /app/base.json /app/override.json > /app/merged.json
