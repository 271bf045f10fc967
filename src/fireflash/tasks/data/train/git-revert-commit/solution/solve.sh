#!/bin/bash
cd /app/calc && git revert --no-edit HEAD
