#!/bin/bash
chmod a+x /app/bin/*.sh
