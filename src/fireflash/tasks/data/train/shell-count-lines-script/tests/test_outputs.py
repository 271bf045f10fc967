"""Checks for shell-count-lines-script."""

import subprocess
import tempfile
from pathlib import Path

APP = Path("/app")


def count(directory):
    out = subprocess.run(["/app/count_lines.sh", str(directory)], capture_output=True, text=True, timeout=10, check=False)
    return out.stdout.strip()


def test_counts_sample_directory():
    assert count(APP / "samples") == str(sum(len(p.read_text().splitlines()) for p in (APP / "samples").glob("*.txt")))


def test_counts_fresh_directory():
    with tempfile.TemporaryDirectory() as d:
        for i, n in enumerate([4, 6, 11]):
            Path(d, f"f{i}.txt").write_text("line\n" * n)
        Path(d, "notes").with_suffix(".log").write_text("no\n" * 9)
        assert count(d) == str(4 + 6 + 11)


def test_empty_directory_prints_zero():
    with tempfile.TemporaryDirectory() as d:
        Path(d, "other").with_suffix(".csv").write_text("a\n")
        assert count(d) == str(len([]))
