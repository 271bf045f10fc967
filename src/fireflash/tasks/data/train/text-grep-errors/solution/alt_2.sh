#!/bin/bash
sed -n '/ERROR/p' /app/app.log > /app/errors.log
