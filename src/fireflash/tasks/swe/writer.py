"""A kept mutation → a Harbor-layout task directory (issue 30, deliverable 3).

    swe-<package>-<version>-<module>-<function>-<operator>-<n>/
        instruction.md          the symptom (instruction.py); never the file, line or fix
        task.toml               grader = "swe"; fail_to_pass / pass_to_pass node ids in [metadata]
        environment/Dockerfile  the package image's Dockerfile (suite.dockerfile): shared layers
        environment/app/        the sdist's tree with the mutation applied and every test path removed
        tests/test.sh           copies the withheld test files back into /app and runs pytest → JUnit XML
        tests/suite/            the test files with a failing test, and the suite's helpers (conftest.py, data)
        tests/pytest.ini        an empty configuration: the agent's pytest.ini/conftest.py cannot change the run
        solution/solve.sh       the reverse patch: puts the original lines back

Only the test files holding a FAIL_TO_PASS test are shipped and run (PASS_TO_PASS: the other recorded
passing tests in them): grading stays a few seconds, and gate 2 has only those files to check.
"""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path, PurePosixPath

from fireflash.tasks.swe.inside import INI, PYTEST_FLAGS
from fireflash.tasks.swe.mutate import Mutation
from fireflash.tasks.swe.packages import SwePackage
from fireflash.tasks.swe.suite import dockerfile

TEST_FILE_GLOBS = ("test_*.py", "*_test.py")


def task_id(pkg: SwePackage, mutation: Mutation) -> str:
    """``swe-<package>-<version>-<module>-<function>-<operator>-<n>``: names package, version, function, mutation."""
    return f"swe-{pkg.name}-{pkg.version}-{mutation.slug}"


def reverse_patch(mutated: str, original: str) -> tuple[str, str]:
    """(old, new): the smallest block of whole lines of ``mutated`` that occurs once and whose replacement by
    ``new`` gives ``original``."""
    a, b = mutated.splitlines(keepends=True), original.splitlines(keepends=True)
    ops = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not ops:
        raise ValueError("the mutated and original texts are equal")
    i1, i2, j1, j2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    while True:
        old = "".join(a[i1:i2])
        if old and mutated.count(old) == 1:
            return old, "".join(b[j1:j2])
        if i1 == 0 and i2 == len(a):
            return mutated, original
        if i1 > 0:
            i1, j1 = i1 - 1, j1 - 1
        if i2 < len(a):
            i2, j2 = i2 + 1, j2 + 1


def solve_script(path_in_app: str, old: str, new: str) -> str:
    """``solution/solve.sh``: a Python heredoc replacing ``old`` by ``new`` in ``/app/<path_in_app>``."""
    return (
        "#!/bin/bash\n"
        "# Reference solution: the reverse of the injected change (FireFlash SWE generator, issue 30).\n"
        "python3 - <<'FIREFLASH_PATCH'\n"
        "from pathlib import Path\n"
        f"target = Path({json.dumps('/app/' + path_in_app)})\n"
        f"old = {json.dumps(old)}\n"
        f"new = {json.dumps(new)}\n"
        "text = target.read_text()\n"
        "if text.count(old) != 1:\n"
        "    raise SystemExit(f'{target}: the lines to restore are not there once')\n"
        "target.write_text(text.replace(old, new))\n"
        "FIREFLASH_PATCH\n"
    )


def test_script(pkg: SwePackage, test_files: list[str]) -> str:
    """``tests/test.sh``: restore the withheld test files in /app (replacing any the agent made), drop conftest.py
    files the task did not ship, run pytest on the shipped test files with the task's empty configuration; when
    pytest stops before writing a report (a conftest.py that cannot import the broken package), write one
    with a single error so the grader scores 0 with a report (gate 8) instead of finding none."""
    pythonpath = "/app" if pkg.source_root == "." else f"/app/{pkg.source_root}"
    files = " ".join(test_files)
    flags = " ".join(PYTEST_FLAGS)
    return (
        "#!/bin/bash\n"
        "# The package's own tests, withheld from the agent, are put back and run (FireFlash SWE generator).\n"
        "cd /app || exit 1\n"
        "find /app -name conftest.py -delete\n"
        "cp -r /tests/suite/. /app/\n"
        f"export PYTHONPATH={pythonpath} PYTHONDONTWRITEBYTECODE=1\n"
        f"python3 -m pytest {flags} -c /tests/pytest.ini --rootdir /app --junitxml /logs/verifier/junit.xml {files}\n"
        "status=$?\n"
        "# a conftest.py that cannot import the broken package stops pytest before it writes a report: say so\n"
        "[ -s /logs/verifier/junit.xml ] || printf '%s\\n' '<?xml version=\"1.0\"?><testsuite name=\"pytest\" "
        "tests=\"1\" errors=\"1\"><testcase classname=\"collection\" name=\"collection\"><error message=\"pytest "
        "wrote no report: the package or a conftest.py does not import\"/></testcase></testsuite>' "
        "> /logs/verifier/junit.xml\n"
        "exit $status\n"
    )


def _is_test_file(path: PurePosixPath) -> bool:
    return any(path.match(g) for g in TEST_FILE_GLOBS)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def write_task(out: Path, pkg: SwePackage, source: Path, mutation: Mutation, instruction: str,
               fail_to_pass: list[str], recorded: list[str], suite_sec: float) -> Path:
    """Write the task of ``mutation`` under ``out`` (replacing one of the same id); return its directory.

    Args:
        source: the sdist's extracted tree (tests included), unmutated.
        mutation: its ``file`` is relative to ``pkg.source_root``.
        fail_to_pass: the recorded tests the mutation fails (node ids relative to /app).
        recorded: every test recorded as passing on the original package.
        suite_sec: one baseline run, seconds (sets the verifier's timeout).
    """
    root = out / task_id(pkg, mutation)
    if root.exists():
        shutil.rmtree(root)
    app = root / "environment" / "app"
    shutil.copytree(source, app, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    rel = str(PurePosixPath(pkg.source_root) / mutation.file) if pkg.source_root != "." else mutation.file
    (app / rel).write_text(mutation.mutated, encoding="utf-8")
    suite = root / "tests" / "suite"
    failing_files = sorted({n.split("::", 1)[0] for n in fail_to_pass})
    for test_path in pkg.test_paths:
        src = source / test_path
        files = [src] if src.is_file() else [p for p in src.rglob("*") if p.is_file()]
        for f in files:
            relf = PurePosixPath(f.relative_to(source).as_posix())
            if "__pycache__" in relf.parts:
                continue
            if not _is_test_file(relf) or str(relf) in failing_files:
                (suite / relf).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, suite / relf)
        target = app / test_path
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for conftest in app.rglob("conftest.py"):  # test.sh deletes them; ship the package's own with the tests
        relc = conftest.relative_to(app)
        (suite / relc).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(conftest, suite / relc)
    pass_to_pass = [n for n in recorded if n.split("::", 1)[0] in failing_files and n not in fail_to_pass]
    (root / "environment" / "Dockerfile").write_text(dockerfile(pkg))
    (root / "tests" / "pytest.ini").write_text(INI)
    (root / "tests" / "test.sh").write_text(test_script(pkg, failing_files))
    (root / "solution").mkdir()
    old, new = reverse_patch(mutation.mutated, mutation.original)
    (root / "solution" / "solve.sh").write_text(solve_script(rel, old, new))
    (root / "instruction.md").write_text(instruction)
    (root / "task.toml").write_text(_task_toml(pkg, fail_to_pass, pass_to_pass, suite_sec))
    return root


def _task_toml(pkg: SwePackage, fail_to_pass: list[str], pass_to_pass: list[str], suite_sec: float) -> str:
    def ids(values: list[str]) -> str:
        return "[\n" + "".join(f"    {json.dumps(v)},\n" for v in values) + "]"
    return (
        'version = "1.0"\n\n'
        "[metadata]\n"
        'author_name = "FireFlash SWE generator (issue 30)"\n'
        'difficulty = "hard"\n'
        'category = "software-engineering"\n'
        f'tags = ["software-engineering", "swe-generated", {json.dumps(pkg.name)}]\n'
        "tier = 3\n"
        'grader = "swe"\n'
        f"source = {json.dumps(f'pypi:{pkg.name}=={pkg.version}')}\n"
        f"fail_to_pass = {ids(fail_to_pass)}\n"
        f"pass_to_pass = {ids(pass_to_pass)}\n\n"
        "[verifier]\n"
        f"timeout_sec = {max(120.0, round(10 * suite_sec))}\n\n"
        "[agent]\n"
        "timeout_sec = 1800.0\n\n"
        "[environment]\n"
        "build_timeout_sec = 900.0\n"
        "cpus = 1\n"
        "memory_mb = 2048\n"
        "storage_mb = 1024\n"
        "allow_internet = false\n"
    )
