"""The nine validation gates a task must pass before it enters the pool (RECIPE.md §3).

    report = await validate_task(task, backend, GatesConfig())
    report.passed, report.failed_gates      # e.g. False, [6]
    report.skipped_gates                    # e.g. [7]: the task ships no solution/alt_*.sh

    1 reference      the reference solution, replayed as Bash tool calls in the training sandbox
                     (offline, as training is) and scored by the task's grader, solves the task
    2 stated         every path, name and format the tests require appears in the instruction; test
                     inputs, computed expected values and values to find are reported as notes
    3 offline        network by phase (issue 26): the agent's sandbox (where the reference is
                     replayed) and the verifier's grading fork have no network, and both worked
                     offline (the reference solved, the verifier reported); a task's
                     allow_internet = true is recorded, and what its test.sh installs at test time
                     is staged at build time, what could not be is named
    4 starts         N cold starts of the environment, each within the deadline, none hangs
    5 no_leaks       tests/solution unreachable from the agent's sandbox; no copy of the solution's
                     lines in the environment; no git history beyond HEAD in any repository at any
                     depth (preparation strips it, ``git_strip``; gate 5 names what is left); a task
                     with ``keep_git_history = true`` fails only where kept history holds the reference
                     solution's output reached otherwise than its declared ``git_premise``
    6 null_zero      doing nothing, and boilerplate (expected files empty / placeholder), score 0;
                     checks they pass are recorded as ``free_checks`` (no partial credit, calibrated
                     once here; ``apply_gate_reports`` hands them to the grader), so only a probe
                     passing every check fails
    7 not_fragile    every solution/alt_*.sh solves the task too (skipped when none is shipped)
    8 malformed_ok   fuzzed final workspaces are scored without a crash, hang or missing report
    9 deterministic  the same final state scored K times gives identical scores and check outcomes

A verifier that never ran (a missing tool, exit 127, a test file that cannot import, no report: judged on
the reference-solved state, ``GateContext.verifier_not_run``) fails gates 1, 6, 8 and 9 as "verifier did
not run: <why>": its scores are all 0, which would pass 6, 8 and 9 (issue 26).
Every gate runs even when an earlier one failed, so a report names all problems at once. A gate with
nothing to check (gate 7 without alternative solutions) is *skipped*: not a failure, so the task still
enters the pool, but the report says so instead of claiming the gate passed.
Simplification: gate 2's optional LLM judge is not implemented (literal matching only).
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from fireflash.curation.checks import GATES
from fireflash.curation.context import GateContext
from fireflash.protocols import SCHEMA_VERSION, SandboxBackend, Task
from fireflash.tasks.config import GatesConfig

GATE_NAMES = {
    1: "reference",
    2: "stated",
    3: "offline",
    4: "starts",
    5: "no_leaks",
    6: "null_zero",
    7: "not_fragile",
    8: "malformed_ok",
    9: "deterministic",
}


class GateResult(BaseModel):
    """One gate's verdict on one task; ``detail`` says what was measured, what failed or why it was skipped."""

    model_config = ConfigDict(extra="forbid")

    gate: int
    name: str
    status: Literal["passed", "failed", "skipped"]
    detail: str = ""
    duration_sec: float = 0.0

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        """A report read back carries ``passed``, which is derived from ``status``."""
        if isinstance(data, dict) and "passed" in data:
            data = {k: v for k, v in data.items() if k != "passed"}
        return data

    @computed_field  # kept in the JSON next to ``status``, as reports before "skipped" existed had it
    @property
    def passed(self) -> bool:
        """True only if the gate checked something and it held; a skipped gate did not pass."""
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"


class GateReport(BaseModel):
    """One task's validation: written as JSON by ``fireflash tasks validate``."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    task_id: str
    path: str | None = None
    passed: bool  # no selected gate failed (skipped gates do not block the pool)
    gates: list[GateResult]
    free_checks: list[str] = Field(
        default_factory=list,
        description="Gate 6's calibration: check ids a do-nothing or boilerplate attempt passes; the tests "
        "grader gives them no partial credit (grading.graders.partial_credit; a full solve is still 1.0).",
    )
    notes: list[str] = Field(
        default_factory=list,
        description="What the gates could not enforce as the task asks, e.g. storage_mb only a tmpfs cap on a host "
        "without loop devices (sandbox/disks.py).",
    )
    duration_sec: float

    @property
    def failed_gates(self) -> list[int]:
        return [g.gate for g in self.gates if g.failed]

    @property
    def skipped_gates(self) -> list[int]:
        return [g.gate for g in self.gates if g.status == "skipped"]


async def validate_task(
    task: Task, backend: SandboxBackend, cfg: GatesConfig | None = None, gates: Iterable[int] = tuple(GATES)
) -> GateReport:
    """Run the gates on ``task`` with sandboxes from ``backend`` (RECIPE.md §3).

    Gate 1 runs first when selected (gates 5-9 use the state it leaves); a gate that raises is
    recorded as failed with the exception, and the remaining gates still run. A check that returns
    ``None`` instead of a verdict had nothing to check and is recorded as skipped.

    Returns:
        A ``GateReport``; ``passed`` is True if no selected gate failed (each passed or was skipped).
    """
    cfg = cfg or GatesConfig()
    selected = sorted(set(gates))
    unknown = [g for g in selected if g not in GATES]
    if unknown:
        raise ValueError(f"unknown gate(s) {unknown}; gates are 1..9")
    state = GateContext(task, backend, cfg)
    results, start = [], time.monotonic()
    try:
        for gate in selected:
            t0 = time.monotonic()
            try:
                ok, detail = await GATES[gate](state)
            except Exception as e:  # noqa: BLE001 - recorded per gate so one broken gate hides no other
                ok, detail = False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"[:1500]
            results.append(
                GateResult(
                    gate=gate,
                    name=GATE_NAMES[gate],
                    status="skipped" if ok is None else "passed" if ok else "failed",
                    detail=detail,
                    duration_sec=round(time.monotonic() - t0, 3),
                )
            )
    finally:
        for sandbox in (state.solved, state.parent):
            if sandbox is not None:
                with contextlib.suppress(Exception):
                    await sandbox.close()
    notes = []
    disks = getattr(backend, "disks", None)  # the bwrap backend's (sandbox/disks.py); other backends have none
    if disks is not None and disks.note is not None:
        notes.append(
            f"storage_mb = {task.environment.storage_mb} was not a disk quota in these sandboxes ({disks.note}): "
            "their writes went to a tmpfs of that size, which counts against memory_mb"
        )
    return GateReport(
        task_id=task.id,
        path=str(task.path) if task.path else None,
        passed=not any(r.failed for r in results),
        gates=results,
        free_checks=state.free_checks,
        notes=notes,
        duration_sec=round(time.monotonic() - start, 3),
    )


def apply_gate_reports(tasks: list[Task], report_dir: str | Path) -> None:
    """Give each task its gate report's calibration: ``metadata['free_checks']``, which the tests grader
    leaves out of partial credit (RECIPE.md §3: "a calibrated final partial score").

    Args:
        report_dir: where ``fireflash tasks validate --report-dir`` wrote one ``<task id>.json`` per task.

    Raises:
        TaskLoadError: a task has no report there, an unreadable one, or one that failed a gate (a task enters
            the pool only after passing the gates); the message names the file and the command to run.
    """
    from fireflash.tasks.loader import TaskLoadError

    for task in tasks:
        path = Path(report_dir) / f"{task.id}.json"
        fix = f"run `fireflash tasks validate {task.path or task.id} --report-dir {report_dir}`"
        if not path.is_file():
            raise TaskLoadError(f"{path}: no gate report for task {task.id}; {fix}")
        try:
            report = GateReport.model_validate_json(path.read_text())
        except ValueError as e:
            raise TaskLoadError(f"{path}: not a gate report ({e}); {fix}") from None
        if not report.passed:
            raise TaskLoadError(
                f"{path}: task {task.id} failed gate(s) {report.failed_gates}; fix the task and {fix}, "
                "or leave it out of the pool"
            )
        task.metadata["free_checks"] = list(report.free_checks)
