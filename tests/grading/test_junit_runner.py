"""The stdlib JUnit runner shipped into bundled tasks: runs under the system python3, reports every check."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fireflash.grading import junit_runner
from fireflash.grading.reports import parse_junit
from fireflash.grading.verifier import list_test_files
from fireflash.tasks.loader import DATA_DIR

pytestmark = pytest.mark.unit
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def run(tmp_path, source, name="test_things.py", *extra):
    test_file = tmp_path / name
    test_file.write_text(source)
    report = tmp_path / "out" / "junit.xml"
    proc = subprocess.run(
        [PYTHON, junit_runner.__file__, "--junitxml", str(report), str(test_file), *extra],
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


def test_report_writer_ignores_patches_made_by_the_tested_code(tmp_path):
    """Issue 27: code the tests import patched the runner's XML writer so <failure> vanished."""
    _, results = run(
        tmp_path,
        (
            "import xml.etree.ElementTree as ET\n"
            "_orig = ET.SubElement\n"
            "ET.SubElement = lambda p, tag, *a, **k: ET.Element(tag) if tag == 'failure' else _orig(p, tag, *a, **k)\n"
            "def test_bad():\n    assert False\n"
        ),
    )
    assert results == {"test_things.test_bad": False}


def test_a_test_process_that_dies_or_hangs_fails_the_checks_it_did_not_report(tmp_path):
    """Fail closed: the report still names every declared check; those without an outcome fail."""
    proc, results = run(
        tmp_path,
        (
            "import os, signal, time\n"
            "def test_a():\n    pass\n"
            "def test_hang():\n    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n    time.sleep(60)\n"
            "def test_c():\n    pass\n"
        ),
        "test_things.py",
        "--timeout-sec",
        "1",
    )
    assert results == {
        "test_things.test_a": True,
        "test_things.test_hang": False,
        "test_things.test_c": False,
    }
    assert "timed out" in proc.stdout
    _, results = run(
        tmp_path,
        "import os\ndef test_a():\n    pass\ndef test_b():\n    os._exit(0)\ndef test_c():\n    pass\n",
    )
    assert results == {"test_things.test_a": True, "test_things.test_b": False, "test_things.test_c": False}


def test_processes_the_tests_start_do_not_outlive_the_runner(tmp_path):
    """A setsid daemon and a fork chain started by the tested code are gone when the runner exits (Landlock
    signal scoping, kernel 6.12+; in a bwrap sandbox the runner also kills every non-ancestor)."""
    if junit_runner._landlock_abi(junit_runner._libc()) < 6:
        pytest.skip("needs Landlock ABI 6 (signal scoping) outside a bwrap sandbox")
    run(
        tmp_path,
        (
            "import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        time.sleep(1.0)\n"
            "        open('daemon_alive', 'w').close()\n"
            "    os._exit(0)\n"
            "if os.fork() == 0:\n"
            "    t = time.monotonic()\n"
            "    while time.monotonic() - t < 1.0:\n"
            "        if os.fork():\n"
            "            os._exit(0)\n"
            "    open('chain_alive', 'w').close()\n"
            "    os._exit(0)\n"
            "def test_ok():\n    pass\n"
        ),
    )
    time.sleep(1.5)
    assert not (tmp_path / "daemon_alive").exists() and not (tmp_path / "chain_alive").exists()


def test_a_test_file_rewritten_during_the_run_is_not_read_again(tmp_path):
    """The parent reads each test file once, before any test process starts."""
    other = tmp_path / "test_b.py"
    other.write_text("def test_b():\n    assert False\n")
    first = tmp_path / "test_a.py"
    first.write_text(
        f"open({str(other)!r}, 'w').write('def test_b():\\n    pass\\n')\ndef test_a():\n    pass\n"
    )
    report = tmp_path / "junit.xml"
    subprocess.run(
        [PYTHON, junit_runner.__file__, "--junitxml", str(report), str(first), str(other)],
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert {r.id: r.passed for r in parse_junit(report.read_bytes())} == {
        "test_a.test_a": True,
        "test_b.test_b": False,
    }


def test_a_line_appended_to_the_test_script_never_runs(tmp_path):
    """bash reads a script as it goes: a line appended while the runner runs would overwrite the report
    after it was written. The tested code cannot write the script (Landlock); anything else that does (here
    a process the script started before the runner) makes the runner fail every check and stop that shell."""
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copyfile(junit_runner.__file__, tests / "junit_runner.py")
    report = tmp_path / "junit.xml"
    script = tests / "test.sh"
    app = tmp_path / "app"
    app.mkdir()
    script.write_text(
        f"(while [ ! -e {app}/started ]; do sleep 0.02; done; echo 'echo forged > {report}' >> {script}; "
        f"touch {app}/appended) &\n"
        f"{PYTHON} {tests}/junit_runner.py --junitxml {report} {tests}/test_a.py\necho done\n"
    )
    (tests / "test_a.py").write_text(
        "import os, time\ndef test_a():\n    open('started', 'w').close()\n"
        "    while not os.path.exists('appended'):\n        time.sleep(0.02)\n"
    )
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, cwd=app, timeout=60, check=False
    )
    assert {r.id: r.passed for r in parse_junit(report.read_bytes())} == {"test_a.test_a": False}
    assert "test script changed" in proc.stdout and "done" not in proc.stdout


def test_the_tested_code_cannot_rewrite_test_data(tmp_path):
    """The tests directory is read-only to the test process (Landlock ABI 2+): expected values the checks
    read after the code under test ran cannot be changed by it, nor can the test script."""
    if junit_runner._landlock_abi(junit_runner._libc()) < 2:
        pytest.skip("needs Landlock ABI 2")
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copyfile(junit_runner.__file__, tests / "junit_runner.py")
    expected = tests / "expected.txt"
    expected.write_text("the right answer")
    (tests / "test_a.py").write_text(
        f"try:\n    open({str(expected)!r}, 'w').write('my answer')\nexcept OSError:\n    pass\n"
        f"def test_answer():\n    assert open({str(expected)!r}).read() == 'my answer'\n"
        "def test_elsewhere_is_writable():\n    open('out.txt', 'w').write('x')\n"
    )
    report = tmp_path / "junit.xml"
    cmd = [PYTHON, str(tests / "junit_runner.py"), "--junitxml", str(report), str(tests / "test_a.py")]
    (tmp_path / "app").mkdir()  # beside the tests directory, as /app is beside /tests
    subprocess.run(cmd, cwd=tmp_path / "app", check=False, timeout=60)
    results = {r.id: r.passed for r in parse_junit(report.read_bytes())}
    assert results == {"test_a.test_answer": False, "test_a.test_elsewhere_is_writable": True}
    assert expected.read_text() == "the right answer"


def test_tasks_ship_no_copy_of_the_runner_and_the_verifier_supplies_it(tmp_path):
    # one runner, the grader's: 66 byte-identical copies in task directories were kept in sync by a test, and a
    # task's own copy decided its scores; now the verifier writes it and replaces any copy a task ships
    fixtures = Path(__file__).parents[1] / "tasks" / "fixtures" / "gates"
    assert sorted(DATA_DIR.glob("*/*/tests/junit_runner.py")) + sorted(fixtures.glob("*/tests/junit_runner.py")) == []
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("python3 /tests/junit_runner.py --junitxml /logs/verifier/junit.xml /tests/t.py\n")
    (tests / "junit_runner.py").write_text("print('a task-shipped runner that passes everything')\n")
    files = {rel: data for rel, data, _ in list_test_files(tests)}
    assert files["junit_runner.py"] == Path(junit_runner.__file__).read_bytes()
    (tests / "test.sh").write_text("pytest /tests/test_outputs.py\n")
    (tests / "junit_runner.py").unlink()
    assert "junit_runner.py" not in {rel for rel, _, _ in list_test_files(tests)}  # only where a file names it
