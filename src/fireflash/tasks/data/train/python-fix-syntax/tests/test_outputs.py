"""Checks for python-fix-syntax."""

import subprocess


def run():
    return subprocess.run(["python3", "/app/hello.py"], capture_output=True, text=True, timeout=10, check=False)


def test_runs_without_error():
    result = run()
    assert result.returncode == 0 and result.stdout


def test_greeting_line():
    assert run().stdout.splitlines()[0] == "Hello from FireFlash"


def test_sum_line():
    assert run().stdout.splitlines()[1] == str(sum(range(1, 11)))
