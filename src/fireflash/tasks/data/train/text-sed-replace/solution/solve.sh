#!/bin/bash
sed -i 's/localhost/db.internal/g' /app/settings.ini
