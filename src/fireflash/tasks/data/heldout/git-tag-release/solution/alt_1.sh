#!/bin/bash
cd /app/service && git tag --annotate --message='Release 1.0.0' v1.0.0
