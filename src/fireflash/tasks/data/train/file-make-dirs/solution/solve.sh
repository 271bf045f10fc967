#!/bin/bash
mkdir -p /app/project/src /app/project/tests /app/project/docs
