#!/bin/bash
awk '/ERROR/' /app/app.log > /app/errors.log
