"""Checks for shell-greet-script."""

import subprocess


def greet(*args):
    return subprocess.run(["/app/greet.sh", *args], capture_output=True, text=True, timeout=10, check=False).stdout


def check(name):
    assert greet(name) == f"Hello, {name}!\n"


def test_greets_a_name():
    check("Ada")


def test_greets_another_name():
    check("Linus")


def test_default_greeting():
    assert greet() == "Hello, World!\n"
