"""The checks file of a generated task (``tests/test_outputs.py``): a header of helpers that read the pristine
inputs in ``/tests/data``, and the one-check shapes most families use (exact output lines, a single value)."""

from __future__ import annotations

_CHECKS_HEADER = """\"\"\"Checks for a generated task. Expected values are computed from pristine copies of the inputs in /tests/data.\"\"\"

import csv
import json
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


def text(name):
    return (DATA / name).read_text()


def lines(name):
    return text(name).splitlines()


def rows(name):
    return list(csv.reader(lines(name)))[1:]


def unchanged(*names):
    for name in names:
        assert (APP / name).read_text() == text(name), f"/app/{name} was modified"
"""


def checks_of(*tests: str) -> str:
    return _CHECKS_HEADER + "".join("\n\n" + t.strip("\n") + "\n" for t in tests)


def check_lines(out: str, expected: str, inputs: tuple[str, ...] = ()) -> str:
    """One check: ``/app/<out>`` holds the lines the Python expression ``expected`` computes; inputs unchanged.

    A single check, so an untouched, emptied or placeholder workspace scores 0 (gate 6).
    """
    keep = f"\n    unchanged({', '.join(map(repr, inputs))})" if inputs else ""
    return checks_of(f"""
def test_exact_output():
    out = APP / {out!r}
    assert out.is_file(), f"{{out}} was not written"
    assert out.read_text().splitlines() == {expected}{keep}""")


def check_value(out: str, expected: str) -> str:
    """One check: ``/app/<out>`` holds ``str(expected)`` (surrounding whitespace ignored)."""
    return checks_of(f"""
def test_value():
    out = APP / {out!r}
    assert out.is_file(), f"{{out}} was not written"
    assert out.read_text().strip() == str({expected})""")
