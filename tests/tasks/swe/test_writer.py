"""The task writer (issue 30): reverse patch, withheld tests, swe grader lists, and test.sh against an agent
that plants a conftest.py / pytest.ini to make every test pass."""

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fireflash.tasks.harbor import load_harbor
from fireflash.tasks.swe.mutate import mutations
from fireflash.tasks.swe.packages import SwePackage
from fireflash.tasks.swe.writer import reverse_patch, write_task

MODULE = "def add(a, b):\n    # sum\n    if b == 0:\n        return a\n    return a + b\n\n\ndef neg(a):\n    return -a\n\n\ndef same(a):\n    return a + 0\n"
TESTS = ("from calc.core import add, neg\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
         "def test_neg():\n    assert neg(4) == -4\n")
OTHER_TESTS = "from calc.core import neg\n\n\ndef test_other():\n    assert neg(0) == 0\n"
PKG = SwePackage(name="calc", version="1.0", modules=["calc"], test_paths=["tests"])


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "calc-1.0"
    (root / "calc").mkdir(parents=True)
    (root / "calc" / "__init__.py").write_text("")
    (root / "calc" / "core.py").write_text(MODULE)
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text(TESTS)
    (root / "tests" / "test_other.py").write_text(OTHER_TESTS)
    (root / "tests" / "conftest.py").write_text("FIXTURE = 1\n")
    return root


def _mutation(source: Path):
    found = mutations(source, ["calc/core.py"], "calc-1.0-0")
    return next(m for m in found if m.function == "add" and m.operator == "compare")


def test_reverse_patch_restores_the_original_and_is_unique() -> None:
    mutated = MODULE.replace("return a + b", "return a")
    old, new = reverse_patch(mutated, MODULE)
    assert mutated.count(old) == 1 and mutated.replace(old, new) == MODULE
    # an edit whose changed line also occurs elsewhere widens to a unique block
    twice = "x = 1\ny = 2\nx = 1\nz = 3\n"
    old, new = reverse_patch(twice.replace("z = 3", "x = 1"), twice)
    assert twice.replace("z = 3", "x = 1").count(old) == 1


def test_written_task_loads_withholds_tests_and_its_solution_restores_the_file(source: Path, tmp_path: Path) -> None:
    m = _mutation(source)
    fail = ["tests/test_core.py::test_add"]
    recorded = ["tests/test_core.py::test_add", "tests/test_core.py::test_neg", "tests/test_other.py::test_other"]
    root = write_task(tmp_path / "out", PKG, source, m, "# calc 1.0: `add` misbehaves\n", fail, recorded, 1.0)
    assert root.name == f"swe-calc-1.0-{m.slug}" and "add" in root.name and m.operator in root.name
    task = load_harbor(root, images=True)
    assert task.grader.kind == "swe"
    assert task.grader.fail_to_pass == fail
    assert task.grader.pass_to_pass == ["tests/test_core.py::test_neg"]  # only the shipped file's tests
    app = root / "environment" / "app"
    assert not (app / "tests").exists() and not list(app.rglob("conftest.py"))
    assert (root / "tests" / "suite" / "tests" / "test_core.py").is_file()
    assert (root / "tests" / "suite" / "tests" / "conftest.py").is_file()
    assert not (root / "tests" / "suite" / "tests" / "test_other.py").exists()
    assert (app / "calc" / "core.py").read_text() == m.mutated
    script = (root / "solution" / "solve.sh").read_text()
    assert "    if b == 0:" not in script.splitlines()  # no line of the fix is a line of the environment
    body = script.split("<<'FIREFLASH_PATCH'\n", 1)[1].rsplit("FIREFLASH_PATCH", 1)[0]
    body = body.replace('"/app/calc/core.py"', repr(str(app / "calc" / "core.py")))
    subprocess.run([sys.executable, "-c", body], check=True)
    assert (app / "calc" / "core.py").read_text() == MODULE


def _grade(root: Path, logs: Path) -> dict[str, bool]:
    """Run the task's test.sh with /app, /tests and /logs pointed at local folders; JUnit outcomes by name."""
    app, tests = root / "environment" / "app", root / "tests"
    script = (tests / "test.sh").read_text().replace("/logs/verifier", str(logs)).replace(" /tests/", f" {tests}/")
    script = script.replace("/app", str(app)).replace("python3 -m pytest", f"{sys.executable} -m pytest")
    logs.mkdir(exist_ok=True)
    subprocess.run(["bash", "-c", script], capture_output=True, timeout=120, check=False)
    cases = ET.parse(logs / "junit.xml").getroot().iter("testcase")
    return {c.get("name"): not any(ch.tag in ("failure", "error") for ch in c) for c in cases}


def test_planted_conftest_and_pytest_ini_do_not_make_the_tests_pass(source: Path, tmp_path: Path) -> None:
    m = _mutation(source)
    root = write_task(tmp_path / "out", PKG, source, m, "# x\n", ["tests/test_core.py::test_add"],
                      ["tests/test_core.py::test_add", "tests/test_core.py::test_neg"], 1.0)
    assert _grade(root, tmp_path / "logs0") == {"test_add": False, "test_neg": True}
    app = root / "environment" / "app"
    cheat = ("import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
             "    out = yield\n    rep = out.get_result()\n    rep.outcome = 'passed'\n")
    (app / "conftest.py").write_text(cheat)
    (app / "calc" / "conftest.py").write_text(cheat)
    (app / "pytest.ini").write_text("[pytest]\naddopts = -p no:junitxml\n")
    (app / "tests").mkdir(exist_ok=True)
    (app / "tests" / "test_core.py").write_text("def test_add():\n    pass\n")  # a replaced test file
    assert _grade(root, tmp_path / "logs1") == {"test_add": False, "test_neg": True}


def test_a_package_that_breaks_conftest_still_gets_a_report(source: Path, tmp_path: Path) -> None:
    (source / "tests" / "conftest.py").write_text("import calc.core\n")
    root = write_task(tmp_path / "out", PKG, source, _mutation(source), "# x\n", ["tests/test_core.py::test_add"],
                      ["tests/test_core.py::test_add", "tests/test_core.py::test_neg"], 1.0)
    (root / "environment" / "app" / "calc" / "core.py").write_text("def (\n")
    assert _grade(root, tmp_path / "logs") == {"collection": False}
