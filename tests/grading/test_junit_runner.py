"""The stdlib JUnit runner shipped into bundled tasks: runs under the system python3, reports every check."""

import subprocess
import sys
from pathlib import Path

import pytest

from fireflash.grading import junit_runner
from fireflash.grading.reports import parse_junit
from fireflash.tasks.loader import DATA_DIR

pytestmark = pytest.mark.unit
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def run(tmp_path, source, name="test_things.py"):
    test_file = tmp_path / name
    test_file.write_text(source)
    report = tmp_path / "out" / "junit.xml"
    proc = subprocess.run(
        [PYTHON, junit_runner.__file__, "--junitxml", str(report), str(test_file)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    return proc, {r.id: r.passed for r in parse_junit(report.read_bytes())}


def test_passes_failures_and_exceptions(tmp_path):
    proc, results = run(
        tmp_path,
        (
            "import sys\n"
            "def test_ok():\n    assert 1 + 1 == 2\n"
            "def test_bad():\n    assert 'a' == 'b'\n"
            "def test_raises():\n    open('/nonexistent/file').read()\n"
            "def test_exits():\n    sys.exit(0)\n"
            "def helper():\n    raise AssertionError('not a test')\n"
        ),
    )
    assert results == {
        "test_things.test_ok": True,
        "test_things.test_bad": False,
        "test_things.test_raises": False,
        "test_things.test_exits": False,
    }
    assert proc.returncode == 1 and "test_things::test_bad FAILED" in proc.stdout


def test_broken_test_file_fails_every_declared_check(tmp_path):
    _, results = run(tmp_path, "import no_such_module\ndef test_a():\n    pass\ndef test_b():\n    pass\n")
    assert results == {"test_things.test_a": False, "test_things.test_b": False}


def test_control_characters_in_messages_stay_valid_xml(tmp_path):
    _, results = run(tmp_path, "def test_junk():\n    assert False, '\\x00\\x1b[31m\\udcff bad'\n")
    assert results == {"test_things.test_junk": False}


def test_cwd_is_importable(tmp_path):
    (tmp_path / "mymod.py").write_text("VALUE = 3\n")
    _, results = run(tmp_path, "from mymod import VALUE\ndef test_value():\n    assert VALUE == 3\n")
    assert results == {"test_things.test_value": True}


def test_bundled_copies_match_the_canonical_runner():
    canonical = Path(junit_runner.__file__).read_bytes()
    copies = sorted(DATA_DIR.glob("*/*/tests/junit_runner.py"))
    assert len(copies) >= 40
    assert [c for c in copies if c.read_bytes() != canonical] == []
