"""The user's entry points: `fireflash --help` (`app`; the console script reaches it as `fireflash.cli:app`).

    fireflash train -c C [a.b=v...]          the main job: asynchronous GRPO (--resume, --sync, --dry-run)
    fireflash tasks validate|fuzz PATH...    the nine validation gates (RECIPE.md §3)
    fireflash tasks probe TASKS -c C         difficulty probing → pool manifest (RECIPE.md §2)
    fireflash tasks build PATH...            each task's environment image, built once (podman/buildah/docker)
    fireflash images bases                   local Debian bookworm/trixie bases for offline machines (mmdebstrap)
    fireflash eval TASKS --model M           Pass@1 over 5 trials, pass@k, cost per trial (RECIPE.md §6)
    fireflash report RUN_DIR | pareto ...    plots of a training run; the cost/Pass@1 frontier
    fireflash agent run TASK_DIR | replay T  one attempt through the harness; print a saved trajectory
    fireflash doctor                         is this host ready? (each failure names its fix)
    fireflash config show [-c C] [a.b=v...]  the resolved config tree as TOML
    fireflash model warm [NAME]              cache the embedded model once (~40 s first time)
    fireflash serve MODEL [-c C] [a.b=v...]  a local engine behind SGLang's HTTP API (engines/serve.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fireflash.cli.agent import app as agent_app
from fireflash.cli.evaluation import compare_command, eval_command, probe_command, report_app
from fireflash.cli.images import build_command, images_app
from fireflash.cli.sft import sft_command
from fireflash.cli.tasks import app as tasks_app
from fireflash.config import ConfigError, FireFlashConfig, dump_config, load_config
from fireflash.cli.swe import generate_app

app = typer.Typer(help="FireFlash: long-horizon agentic RL (full-parameter GRPO, async rollouts, sandboxes).",
                  no_args_is_help=True, add_completion=False)
config_app = typer.Typer(help="Inspect configuration.", no_args_is_help=True)
model_app = typer.Typer(help="Models: the embedded default and local HF directories.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(model_app, name="model")
app.add_typer(tasks_app, name="tasks")
app.add_typer(agent_app, name="agent")
app.add_typer(report_app, name="report")
app.add_typer(images_app, name="images")
app.command("eval")(eval_command)
app.command("compare")(compare_command)
app.command("sft")(sft_command)
tasks_app.command("probe")(probe_command)
tasks_app.command("build")(build_command)
tasks_app.add_typer(generate_app, name="generate")
console = Console()

ConfigOpt = typer.Option(None, "--config", "-c", help="TOML config file (default: built-in defaults).")
OverridesArg = typer.Argument(None, help="Overrides as KEY.PATH=VALUE, e.g. runtime.steps=3.", show_default=False)


def resolve_config(config: Path | None, overrides: list[str] | None) -> FireFlashConfig:
    """Load config for a command; a bad file exits with code 2 and the error, never a traceback."""
    try:
        return load_config(config, overrides or [])
    except ConfigError as e:
        typer.echo(f"ConfigError: {e}", err=True)
        raise typer.Exit(2) from None


@app.command("train")
def train_command(
    config: Path | None = ConfigOpt,
    overrides: list[str] | None = OverridesArg,
    resume: bool = typer.Option(False, "--resume", help="Continue from the run directory's latest checkpoint."),
    sync: bool = typer.Option(False, "--sync", help="Generate, then train, then generate (idle-time baseline only)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan, check the run directory, model and tasks as the run would, and exit."
    ),
) -> None:
    """Train the policy with asynchronous GRPO on sandboxed agent rollouts (RECIPE.md §1, §5)."""
    cfg = resolve_config(config, (overrides or []) + (["runtime.mode=sync"] if sync else []))
    from fireflash.cli.train import check_train_config, check_training, describe_plan, run_training
    from fireflash.models import ModelNotFound
    from fireflash.runtime.placement import PlacementError
    from fireflash.runtime.ray_backend import RayUnavailable
    from fireflash.runtime.ray_workers import WorkersLost
    from fireflash.sandbox import SandboxUnavailable
    from fireflash.tracking import RunDirInUse
    from fireflash.training.checkpoint import CheckpointError

    # before anything runs, every error a user can cause or fix is one line and exit 2 (TaskLoadError, HeldoutLeak,
    # ConfigError and a bad pool manifest are ValueErrors; ModelNotFound and a missing manifest FileNotFoundErrors)
    try:
        check_train_config(cfg)
        if dry_run:  # the plan (with a Ray run's placement) first, then what the run checks; loads no model
            console.print(describe_plan(cfg))
        tasks = check_training(cfg, resume)
    except (CheckpointError, RunDirInUse, ModelNotFound, PlacementError, ValueError, FileNotFoundError) as e:
        typer.echo(f"{type(e).__name__}: {e}", err=True)
        raise typer.Exit(2) from None
    if dry_run:
        start = "resumes from the latest checkpoint" if resume else f"model {cfg.model.name_or_path} found, no earlier run"
        console.print(f"ready: {len(tasks)} tasks load; {start} in {cfg.tracking.run_dir}")
        return
    # once running, only the failures with a known cause are one line: any other error keeps its traceback
    try:
        run_dir = run_training(cfg, resume=resume, tasks=tasks)
    except (CheckpointError, SandboxUnavailable, ModelNotFound, PlacementError, RayUnavailable, WorkersLost) as e:
        typer.echo(f"{type(e).__name__}: {e}", err=True)
        raise typer.Exit(2) from None
    console.print(f"run directory: {run_dir}  (metrics.jsonl, checkpoints/, trajectories/, tensorboard/)")


@app.command("doctor")
def doctor_command(model: str = typer.Option("smollm2-135m", help="Model to check.")) -> None:
    """Check Python, torch, sandboxing (bubblewrap, namespaces, cgroups), the embedded model and disk."""
    from fireflash.cli.doctor import run_checks

    checks = run_checks(model)
    table = Table(title="fireflash doctor")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(c.name, "[green]ok[/]" if c.ok else "[red]FAIL[/]", c.detail, c.fix)
    console.print(table)
    failed = [c for c in checks if not c.ok]
    if failed:
        console.print(f"[red]{len(failed)} check(s) failed[/]; apply the fixes above.")
        raise typer.Exit(1)
    console.print("[green]all checks passed[/]")


@config_app.command("show")
def config_show(config: Path | None = ConfigOpt, overrides: list[str] | None = OverridesArg) -> None:
    """Print the resolved config (file + overrides + defaults) as TOML."""
    sys.stdout.write(dump_config(resolve_config(config, overrides)))


@model_app.command("warm")
def model_warm(name: str = typer.Argument("smollm2-135m", help="Embedded name or HF directory.")) -> None:
    """Resolve a model into the local cache (dequantises the embedded GGUF once) and print its directory."""
    import time

    from fireflash.models import ModelNotFound, resolve_model_dir

    start = time.perf_counter()
    try:
        path = resolve_model_dir(name)
    except ModelNotFound as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(1) from None
    console.print(f"{name} → {path} ({time.perf_counter() - start:.1f} s)")


@app.command("serve")
def serve_command(
    model: str = typer.Argument(..., help="Embedded model name or HF directory."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(30000, help="TCP port."),
    weight_sync_timeout_sec: float = typer.Option(
        300.0, help="A weight-update group member that does not join, or a stalled broadcast, fails after this long."
    ),
    config: Path | None = ConfigOpt,
    overrides: list[str] | None = OverridesArg,
) -> None:
    """Serve the config's engine section as a local engine through SGLang's native HTTP API until Ctrl-C."""
    cfg = resolve_config(config, overrides)
    from fireflash.engines.serve_process import serve_forever
    from fireflash.models import ModelNotFound

    try:
        serve_forever(cfg.engine, model, host, port, cfg.model.cache_dir, weight_sync_timeout_sec)
    except (ModelNotFound, OSError) as e:
        typer.echo(f"{type(e).__name__}: {e}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    app()

