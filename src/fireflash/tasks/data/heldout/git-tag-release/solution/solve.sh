#!/bin/bash
git -C /app/service tag -a v1.0.0 -m 'Release 1.0.0'
