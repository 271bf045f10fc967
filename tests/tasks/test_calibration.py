"""Gate 6 calibrates partial credit once per task; the pool hands it to the grader (issue 27).

A Terminal-Bench-shaped task whose tests include ``test_output_exists`` stays in the pool: the checks a
do-nothing or boilerplate attempt passes are recorded in its gate report as free checks, and an empty
output file then scores 0 instead of 0.667, while the full solve still scores 1.0.
"""

import asyncio
from pathlib import Path

import pytest

from fireflash.grading.graders import make_grader
from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.curation.gates import GateReport, GateResult, apply_gate_reports, validate_task
from fireflash.curation.pool import load_pool
from fireflash.tasks.loader import TaskLoadError, load_task

FIXTURES = Path(__file__).parent / "fixtures" / "gates"
WORD_COUNT = FIXTURES / "valid-word-count"
FREE = ["test_outputs.py::test_input_unchanged", "test_outputs.py::test_output_exists"]  # declared node ids


async def _calibrate_and_grade(tmp_path: Path) -> tuple[GateReport, list[float]]:
    backend = make_backend(SandboxConfig())
    try:
        report = await validate_task(load_task(WORD_COUNT), backend, GatesConfig(), gates=[1, 6])
        (tmp_path / f"{report.task_id}.json").write_text(report.model_dump_json())
        raw = load_task(WORD_COUNT)
        [calibrated] = load_pool([str(WORD_COUNT)], gate_reports_dir=tmp_path)
        parent = await backend.prepare(raw.environment, "word-count")
        empty, solved = await parent.fork(), await parent.fork()
        await empty.write_file("/app/count.txt", b"")
        await solved.exec("wc -w < /app/essay.txt > /app/count.txt", timeout_sec=30)
        grader = make_grader(raw.grader)
        rewards = [(await grader.grade(t, s)).reward for t in (raw, calibrated) for s in (empty, solved)]
        return report, rewards
    finally:
        await backend.close()


@pytest.mark.sandbox
def test_gate_6_calibrates_a_test_file_exists_task_and_the_grader_applies_it(tmp_path):
    report, rewards = asyncio.run(_calibrate_and_grade(tmp_path))
    gate6 = report.gates[1]
    assert report.passed and gate6.status == "passed", report.model_dump_json(indent=1)
    assert report.free_checks == FREE and "calibrated: 2 free check(s)" in gate6.detail
    # uncalibrated: the empty file earns 0.667 (the held-out case); calibrated: 0; the full solve 1.0 both ways
    assert [round(r, 3) for r in rewards] == [0.667, 1.0, 0.0, 1.0]


@pytest.mark.sandbox
def test_gate_6_still_rejects_a_task_a_placeholder_solves():
    async def run() -> GateReport:
        backend = make_backend(SandboxConfig())
        try:
            return await validate_task(load_task(FIXTURES / "gate6-free-points"), backend, GatesConfig(), [1, 6])
        finally:
            await backend.close()

    report = asyncio.run(run())
    assert report.failed_gates == [6] and "placeholder files (1) reward=1.000" in report.gates[1].detail


def _report(tmp_path: Path, passed: bool) -> None:
    status = "passed" if passed else "failed"
    gates = [GateResult(gate=6, name="null_zero", status=status)]
    report = GateReport(task_id="valid-word-count", passed=passed, gates=gates, duration_sec=1.0, free_checks=FREE)
    (tmp_path / "valid-word-count.json").write_text(report.model_dump_json())


@pytest.mark.unit
def test_a_pool_task_needs_a_passing_gate_report(tmp_path):
    task = load_task(WORD_COUNT)
    with pytest.raises(TaskLoadError, match="no gate report for task valid-word-count; run `fireflash tasks validate"):
        apply_gate_reports([task], tmp_path)
    _report(tmp_path, passed=False)
    with pytest.raises(TaskLoadError, match=r"failed gate\(s\) \[6\]"):
        apply_gate_reports([task], tmp_path)
    _report(tmp_path, passed=True)
    apply_gate_reports([task], tmp_path)
    assert task.metadata["free_checks"] == FREE
