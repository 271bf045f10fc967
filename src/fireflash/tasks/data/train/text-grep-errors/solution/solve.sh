#!/bin/bash
grep ERROR /app/app.log > /app/errors.log
