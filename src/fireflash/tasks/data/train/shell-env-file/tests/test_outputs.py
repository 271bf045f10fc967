"""Checks for shell-env-file."""

from pathlib import Path

APP = Path("/app")


def lines():
    return (APP / ".env").read_text().splitlines()


def test_port_line():
    assert "APP_PORT=8080" in lines()


def test_mode_and_debug_lines():
    assert "APP_MODE=production" in lines() and "APP_DEBUG=false" in lines()


def test_exact_content():
    assert lines() == ["APP_PORT=8080", "APP_MODE=production", "APP_DEBUG=false"]
