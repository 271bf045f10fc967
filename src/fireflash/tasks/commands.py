"""``fireflash tasks ...``: validate task directories through the nine gates, fuzz the graders.

fireflash tasks validate bundled:train bundled:heldout --report-dir runs/gates
fireflash tasks validate my-task/ --gates 1,2,6
fireflash tasks fuzz bundled:train --cases 1000
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table

from fireflash.progress import Progress
from fireflash.protocols import Task
from fireflash.sandbox import SandboxConfig, SandboxUnavailable, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.tasks.fuzz_run import fuzz_graders
from fireflash.tasks.gates import GATE_NAMES, GateReport, validate_task
from fireflash.tasks.loader import load_tasks

CELLS = {"passed": "[green]ok[/green]", "failed": "[red]FAIL[/red]", "skipped": "[yellow]skip[/yellow]"}
app = typer.Typer(help="Task sets: validation gates and grader fuzzing (RECIPE.md §3).", no_args_is_help=True)
console = Console()

PathsArg = typer.Argument(
    ..., help="Task directories, directories of tasks, or bundled:train / bundled:heldout."
)
ReportDirOpt = typer.Option(None, help="Write one JSON GateReport per task here.")
GatesOpt = typer.Option(",".join(str(g) for g in GATE_NAMES), help="Comma-separated gates to run.")
BackendOpt = typer.Option("bwrap", help="Sandbox backend (sandbox.backend).")
TaskImagesOpt = typer.Option(
    "auto", help="sandbox.task_images: auto (an image only for tasks the host's userland cannot run), always, never."
)
ColdStartsOpt = typer.Option(GatesConfig().cold_starts, help="Gate 4: cold starts per task.")
RepeatsOpt = typer.Option(GatesConfig().determinism_repeats, help="Gate 9: scorings per state.")
FuzzCasesOpt = typer.Option(GatesConfig().fuzz_cases, help="Gate 8: malformed workspaces per task.")
CasesOpt = typer.Option(1000, help="Malformed workspaces in total, spread over the tasks.")
FuzzRepeatsOpt = typer.Option(2, help="Scorings of each workspace (identical inputs must score identically).")
ReportOpt = typer.Option(None, help="Write the summary as JSON here.")


def _fail(message: str) -> NoReturn:
    """One line on stderr and exit 2: a bad option or path, found before any sandbox starts."""
    typer.echo(message, err=True)
    raise typer.Exit(2)


def _options(model: type[BaseModel], **options: Any) -> Any:
    """``model(**options)``; a bad value exits with one line naming the option (``--cold-starts 0: ...``)."""
    try:
        return model(**options)
    except ValidationError as e:
        _fail("; ".join(f"--{str(err['loc'][0]).replace('_', '-')} {err['input']}: {err['msg']}" for err in e.errors()))


def _gates(text: str) -> list[int]:
    try:
        gates = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        _fail(f"--gates {text!r}: expected comma-separated gate numbers, e.g. 1,2,6")
    if not gates or any(g not in GATE_NAMES for g in gates):
        _fail(f"--gates {text!r}: gates are 1..9")
    return gates


def _writable_dir(path: Path, option: str) -> None:
    """Create ``path`` and write a file in it now, so results are never lost to it after the gates have run.

    ``option`` names it in the message: ``--report-dir runs/gates``.
    """
    if path.exists() and not path.is_dir():
        _fail(f"{option}: {path} is a file, not a directory; pass a writable directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        _fail(f"{option}: cannot write into {path} ({e.strerror or e}); pass a writable directory")


def _load(paths: list[str], sandbox: SandboxConfig) -> tuple[list[Task], list[str]]:
    """Load every path (printing load errors); a path without any task is refused, never counted as 0/0 passed.
    ``sandbox.task_images`` places each task on the host's userland or in its image (built now if needed)."""
    tasks: list[Task] = []
    errors: list[str] = []
    empty: list[str] = []
    for path in paths:
        found, failed = load_tasks([path], sandbox=sandbox, say=console.print)
        tasks += found
        errors += failed
        if not found and not failed:
            empty.append(path)
    for error in errors:
        console.print(f"[red]load error[/red] {error}")
    if empty:
        _fail(f"no tasks found under {', '.join(empty)}: a task is a directory holding task.toml (Harbor) or "
              "task.yaml (Terminal-Bench 1); pass task directories, directories of them, or bundled:train")
    return tasks, errors


def _run(main: Any) -> Any:
    try:
        return asyncio.run(main)
    except SandboxUnavailable as e:
        _fail(f"SandboxUnavailable: {e}")


async def _validate_all(
    tasks, sandbox: SandboxConfig, cfg: GatesConfig, gates: list[int], on_report
) -> list[GateReport]:
    backend = make_backend(sandbox)
    reports = []
    try:
        for task in tasks:
            report = await validate_task(task, backend, cfg, gates)
            on_report(report)
            reports.append(report)
    finally:
        await backend.close()
    return reports


@app.command()
def validate(
    paths: list[str] = PathsArg,
    report_dir: Path | None = ReportDirOpt,
    gates: str = GatesOpt,
    backend: str = BackendOpt,
    cold_starts: int = ColdStartsOpt,
    determinism_repeats: int = RepeatsOpt,
    fuzz_cases: int = FuzzCasesOpt,
    task_images: str = TaskImagesOpt,
) -> None:
    """Run the nine gates on every task; print a table; exit 1 if any task (or task directory) fails."""
    cfg = _options(GatesConfig, cold_starts=cold_starts, determinism_repeats=determinism_repeats, fuzz_cases=fuzz_cases)
    sandbox = _options(SandboxConfig, backend=backend, task_images=task_images)
    selected = _gates(gates)
    if report_dir:
        _writable_dir(report_dir, f"--report-dir {report_dir}")
    tasks, errors = _load(paths, sandbox)

    passed = [0]

    def on_report(report: GateReport) -> None:
        mark = "[green]PASS[/green]" if report.passed else f"[red]FAIL {report.failed_gates}[/red]"
        skipped = f", skipped {report.skipped_gates}" if report.skipped_gates else ""
        console.print(f"{mark} {report.task_id} ({report.duration_sec:.1f} s{skipped})")
        if report_dir:
            (report_dir / f"{report.task_id}.json").write_text(report.model_dump_json(indent=2))
        passed[0] += report.passed
        progress.advance(info=f"{passed[0]} passed every gate")

    start = time.monotonic()
    with Progress("validate tasks", console, total=len(tasks)) as progress:
        reports = _run(_validate_all(tasks, sandbox, cfg, selected, on_report))
    table = Table(title=f"validation: {len(reports)} tasks, {time.monotonic() - start:.0f} s")
    table.add_column("task", no_wrap=True)
    for g in selected:
        table.add_column(str(g), justify="center")
    for r in reports:
        by_gate = {g.gate: g for g in r.gates}
        table.add_row(r.task_id, *(CELLS[by_gate[g].status] for g in selected))
    console.print(table)
    console.print("gates: " + ", ".join(f"{g} {GATE_NAMES[g]}" for g in selected))
    for r in reports:
        for note in r.notes:
            console.print(f"[yellow]{r.task_id} note[/yellow]: {note}")
        for g in r.gates:
            if g.failed:
                console.print(f"[red]{r.task_id} gate {g.gate} {g.name}[/red]: {g.detail}")
            elif g.status == "skipped":
                console.print(f"[yellow]{r.task_id} gate {g.gate} {g.name} skipped[/yellow]: {g.detail}")
    n_failed = sum(not r.passed for r in reports)
    n_skipped = sum(bool(r.skipped_gates) for r in reports)
    console.print(
        f"{len(reports) - n_failed}/{len(reports)} tasks passed every gate ({n_skipped} with a gate skipped); "
        f"{len(errors)} failed to load"
    )
    if n_failed or errors:
        raise typer.Exit(1)


@app.command()
def fuzz(
    paths: list[str] = PathsArg,
    cases: int = CasesOpt,
    backend: str = BackendOpt,
    repeats: int = FuzzRepeatsOpt,
    report: Path | None = ReportOpt,
    task_images: str = TaskImagesOpt,
) -> None:
    """Score malformed workspaces with each task's grader; exit 1 on any crash or non-identical rescoring."""
    sandbox = _options(SandboxConfig, backend=backend, task_images=task_images)
    for option, value in (("--cases", cases), ("--repeats", repeats)):
        if value < 1:
            _fail(f"{option} {value}: must be at least 1")
    if report:
        _writable_dir(report.parent, f"--report {report}")
    tasks, errors = _load(paths, sandbox)
    if not tasks:
        _fail(f"no task loaded from {', '.join(paths)}; fix the load errors above")

    async def run() -> dict[str, Any]:
        return await fuzz_graders(tasks, make_backend(sandbox), cases, repeats)

    summary = _run(run())
    console.print_json(json.dumps(summary))
    if report:
        report.write_text(json.dumps(summary, indent=2))
    if summary["crashes"] or summary["nondeterministic"] or errors:
        raise typer.Exit(1)
