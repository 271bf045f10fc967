#!/bin/bash
# The sandbox's python3 may lack pytest: the bundled stdlib runner runs the checks and writes JUnit XML.
cd /app || exit 1
python3 /tests/junit_runner.py --junitxml /logs/verifier/junit.xml /tests/test_fix.py /tests/test_keep.py
