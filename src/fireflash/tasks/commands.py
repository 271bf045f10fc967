"""``fireflash tasks ...``: validate task directories through the nine gates, fuzz the graders.

fireflash tasks validate bundled:train bundled:heldout --report-dir runs/gates
fireflash tasks validate my-task/ --gates 1,2,6
fireflash tasks fuzz bundled:train --cases 1000
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.tasks.fuzz_run import fuzz_graders
from fireflash.tasks.gates import GATE_NAMES, GateReport, validate_task
from fireflash.tasks.loader import load_tasks

app = typer.Typer(help="Task sets: validation gates and grader fuzzing (RECIPE.md §3).", no_args_is_help=True)
console = Console()

PathsArg = typer.Argument(
    ..., help="Task directories, directories of tasks, or bundled:train / bundled:heldout."
)
ReportDirOpt = typer.Option(None, help="Write one JSON GateReport per task here.")
GatesOpt = typer.Option(",".join(str(g) for g in GATE_NAMES), help="Comma-separated gates to run.")
BackendOpt = typer.Option("bwrap", help="Sandbox backend (sandbox.backend).")
ColdStartsOpt = typer.Option(GatesConfig().cold_starts, help="Gate 4: cold starts per task.")
RepeatsOpt = typer.Option(GatesConfig().determinism_repeats, help="Gate 9: scorings per state.")
FuzzCasesOpt = typer.Option(GatesConfig().fuzz_cases, help="Gate 8: malformed workspaces per task.")
CasesOpt = typer.Option(1000, help="Malformed workspaces in total, spread over the tasks.")
FuzzRepeatsOpt = typer.Option(2, help="Scorings of each workspace (identical inputs must score identically).")
ReportOpt = typer.Option(None, help="Write the summary as JSON here.")


def _gates(text: str) -> list[int]:
    try:
        gates = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"--gates {text!r}: expected comma-separated gate numbers, e.g. 1,2,6"
        ) from None
    if not gates or any(g not in GATE_NAMES for g in gates):
        raise typer.BadParameter(f"--gates {text!r}: gates are 1..9")
    return gates


async def _validate_all(
    tasks, backend_name: str, cfg: GatesConfig, gates: list[int], on_report
) -> list[GateReport]:
    backend = make_backend(SandboxConfig(backend=backend_name))
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
) -> None:
    """Run the nine gates on every task; print a table; exit 1 if any task (or task directory) fails."""
    tasks, errors = load_tasks(paths)
    for error in errors:
        console.print(f"[red]load error[/red] {error}")
    cfg = GatesConfig(cold_starts=cold_starts, determinism_repeats=determinism_repeats, fuzz_cases=fuzz_cases)
    selected = _gates(gates)
    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)

    def on_report(report: GateReport) -> None:
        mark = "[green]PASS[/green]" if report.passed else f"[red]FAIL {report.failed_gates}[/red]"
        console.print(f"{mark} {report.task_id} ({report.duration_sec:.1f} s)")
        if report_dir:
            (report_dir / f"{report.task_id}.json").write_text(report.model_dump_json(indent=2))

    start = time.monotonic()
    reports = asyncio.run(_validate_all(tasks, backend, cfg, selected, on_report))
    table = Table(title=f"validation: {len(reports)} tasks, {time.monotonic() - start:.0f} s")
    table.add_column("task", no_wrap=True)
    for g in selected:
        table.add_column(str(g), justify="center")
    for r in reports:
        by_gate = {g.gate: g for g in r.gates}
        table.add_row(
            r.task_id, *("[green]ok[/green]" if by_gate[g].passed else "[red]FAIL[/red]" for g in selected)
        )
    console.print(table)
    console.print("gates: " + ", ".join(f"{g} {GATE_NAMES[g]}" for g in selected))
    for r in reports:
        for g in r.gates:
            if not g.passed:
                console.print(f"[red]{r.task_id} gate {g.gate} {g.name}[/red]: {g.detail}")
    n_failed = sum(not r.passed for r in reports)
    console.print(
        f"{len(reports) - n_failed}/{len(reports)} tasks passed every gate; {len(errors)} failed to load"
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
) -> None:
    """Score malformed workspaces with each task's grader; exit 1 on any crash or non-identical rescoring."""
    tasks, errors = load_tasks(paths)
    for error in errors:
        console.print(f"[red]load error[/red] {error}")
    summary = asyncio.run(fuzz_graders(tasks, make_backend(SandboxConfig(backend=backend)), cases, repeats))
    console.print_json(json.dumps(summary))
    if report:
        report.write_text(json.dumps(summary, indent=2))
    if summary["crashes"] or summary["nondeterministic"] or errors:
        raise typer.Exit(1)
