#!/bin/bash
cd /app && ln -sfn releases/v2 current
