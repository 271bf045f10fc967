"""Gates 1, 6, 8 and 9 fail a task whose verifier never ran (issue 26 Deliver 6).

Before: every probe of such a task scored 0, so gate 6 ("doing nothing scores 0"), gate 8 ("junk does not
crash the grader") and gate 9 ("the same state scores the same") passed it. Each fixture is valid-sort with
one way the tests never run: a Terminal-Bench-2-style test.sh whose ``uvx`` is missing (it then writes
reward.txt = 0 and exits 0), a test file importing a module the verifier's Python lacks, and a runner that
crashes before writing any report.
"""

import asyncio
import shutil
from pathlib import Path

import pytest

from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.curation.gates import validate_task
from fireflash.tasks.loader import load_task

pytestmark = [pytest.mark.sandbox]

VALID = Path(__file__).parent / "fixtures" / "gates" / "valid-sort"
CFG = GatesConfig(cold_starts=1, fuzz_cases=2, determinism_repeats=2)
GATES = [1, 6, 8, 9]
TB2_TEST_SH = """#!/bin/bash
cd /app
uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def _variant(tmp: Path, name: str) -> Path:
    task = tmp / name
    shutil.copytree(VALID, task)
    tests = task / "tests"
    if name == "missing-uvx":
        (tests / "test.sh").write_text(TB2_TEST_SH)
    elif name == "import-error":
        source = (tests / "test_outputs.py").read_text()
        (tests / "test_outputs.py").write_text("import numpy_is_not_installed_here\n" + source)
    elif name == "crashed-runner":
        (tests / "test.sh").write_text("#!/bin/bash\npython3 -c 'import sys; sys.exit(3)'\n")
    return task


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("not-run")
    # (a verifier that runs still passes these gates: test_gates.py's sound tasks)
    paths = {name: _variant(tmp, name) for name in ("missing-uvx", "import-error", "crashed-runner")}

    async def run():
        backend = make_backend(SandboxConfig())
        try:
            return {n: await validate_task(load_task(p), backend, CFG, gates=GATES) for n, p in paths.items()}
        finally:
            await backend.close()

    return asyncio.run(run())


@pytest.mark.parametrize(
    "name,why",
    [
        ("missing-uvx", "uvx: command not found"),
        ("import-error", "No module named 'numpy_is_not_installed_here'"),
        ("crashed-runner", "no_report"),
    ],
)
def test_verifier_that_never_ran_fails_gates_1_6_8_9(reports, name, why):
    report = reports[name]
    assert report.failed_gates == GATES, report.model_dump_json(indent=1)
    for gate in report.gates:
        assert gate.detail.startswith("verifier did not run: ") and why in gate.detail, gate

