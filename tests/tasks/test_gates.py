"""The nine gates: each broken fixture is rejected by exactly the gate it targets; sound tasks pass all."""

import asyncio
from pathlib import Path

import pytest

from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.tasks.gates import GATE_NAMES, validate_task
from fireflash.tasks.loader import DATA_DIR, load_task

FIXTURES = Path(__file__).parent / "fixtures" / "gates"
BROKEN = [
    (int(p.name[4]), p) for p in sorted(FIXTURES.glob("gate*"))
]  # gate5 has two: a copy, a future commit
SOUND = [
    FIXTURES / "valid-sort",
    DATA_DIR / "train" / "git-revert-commit",
    DATA_DIR / "train" / "swe-parse-duration",
]
CFG = GatesConfig(cold_starts=2, fuzz_cases=len(GATE_NAMES), determinism_repeats=3)


@pytest.mark.unit
def test_a_fixture_for_every_gate():
    assert sorted({gate for gate, _ in BROKEN}) == list(GATE_NAMES)


@pytest.mark.unit
def test_gate_2_alone_needs_no_sandbox():
    stated = asyncio.run(validate_task(load_task(FIXTURES / "valid-sort"), None, CFG, gates=[2]))
    unstated = asyncio.run(
        validate_task(load_task(FIXTURES / "gate2-unstated-requirement"), None, CFG, gates=[2])
    )
    assert stated.passed and not unstated.passed and "count.txt" in unstated.gates[0].detail


async def validate_all(paths):
    backend = make_backend(SandboxConfig())
    try:
        return {p: await validate_task(load_task(p), backend, CFG) for p in paths}
    finally:
        await backend.close()


@pytest.fixture(scope="module")
def reports():
    return asyncio.run(validate_all([*(p for _, p in BROKEN), *SOUND]))


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.parametrize("gate,path", BROKEN, ids=[p.name for _, p in BROKEN])
def test_broken_fixture_rejected_by_its_gate_only(reports, gate, path):
    assert reports[path].failed_gates == [gate], reports[path].model_dump_json(indent=1)


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.parametrize("path", SOUND, ids=[p.name for p in SOUND])
def test_sound_tasks_pass_every_gate(reports, path):
    report = reports[path]
    assert report.passed and [g.gate for g in report.gates] == list(GATE_NAMES), report.model_dump_json(
        indent=1
    )
