"""Checks for python-number-stats."""

import json
import statistics
import subprocess
import tempfile
from pathlib import Path

APP = Path("/app")


def run(values):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(str(v) for v in values) + "\n\n")
    out = subprocess.run(["python3", "/app/stats.py", f.name], capture_output=True, text=True, timeout=10, check=False)
    return json.loads(out.stdout)


def test_count_and_max():
    got = run([3, 1, 4, 1, 5])
    assert got["count"] == len([3, 1, 4, 1, 5]) and float(got["max"]) == float(max([3, 1, 4, 1, 5]))


def test_mean_and_median():
    values = [2.5, 7, 10, 11]
    got = run(values)
    assert got["mean"] == round(statistics.mean(values), 2) and got["median"] == round(statistics.median(values), 2)


def test_example_file():
    values = [float(l) for l in (APP / "numbers.txt").read_text().split()]
    got = run(values)
    assert got["median"] == round(statistics.median(values), 2) and got["count"] == len(values)
