"""Checks for python-fizzbuzz."""

import subprocess


def expected(n):
    return [("Fizz" * (i % 3 == 0) + "Buzz" * (i % 5 == 0)) or str(i) for i in range(1, n + 1)]


def run(n):
    out = subprocess.run(["python3", "/app/fizzbuzz.py", str(n)], capture_output=True, text=True, timeout=10, check=False)
    return out.stdout.splitlines()


def test_first_fifteen():
    assert run(15) == expected(15)


def test_longer_run():
    assert run(100) == expected(100)


def test_single_number():
    assert run(1) == expected(1)
