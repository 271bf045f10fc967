"""``fireflash agent ...``: run one attempt on a task directory, or replay a saved trajectory.

    fireflash agent run TASK_DIR [--engine local|scripted|sglang|vllm] [--script turns.json] [--out DIR] [a.b=v ...]
    fireflash agent replay TRAJECTORY.json

``run`` builds the task's parent sandbox, forks it, calls ``run_attempt`` (the same function training,
probing and evaluation use), writes ``<task>-<attempt>.json`` (the trajectory) and ``.txt`` (a transcript)
into ``--out``, then grades a fork of the final state (``--no-grade`` skips it) and writes ``.score.json``.
The trajectory is on disk before grading starts, so a grader that fails or hangs never loses the attempt.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer

from fireflash.harness.agent import run_attempt
from fireflash.harness.transcript import render_transcript
from fireflash.protocols import Trajectory

TASK_DIR = typer.Argument(..., help="Task directory (task.toml or task.yaml).")
ENGINE = typer.Option(None, help="Engine kind: local, scripted, sglang, vllm (default: engine.kind).")
SCRIPT = typer.Option(None, help="JSON list of assistant texts for --engine scripted.")
OUT = typer.Option(Path("runs/agent"), help="Directory for the trajectory, transcript and score.")
CONFIG = typer.Option(None, "--config", "-c", help="TOML config file (default: built-in defaults).")
OVERRIDES = typer.Argument(None, help="Overrides as KEY.PATH=VALUE, e.g. harness.max_turns=5.")
TRAJECTORY = typer.Argument(..., help="A trajectory JSON written by `agent run` or a training run.")

app = typer.Typer(help="Run one agent attempt on a task, or replay a saved trajectory.", no_args_is_help=True,
                  add_completion=False)


def _fail(message: str) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(2)


def _script(path: Path | None) -> list[str]:
    if path is None:
        return []
    try:
        turns = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        _fail(f"--script {path}: cannot read a JSON list of assistant texts ({e})")
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        _fail(f"--script {path}: expected a JSON list of strings, one assistant turn each")
    return turns


def _save(traj: Trajectory, stem: Path) -> None:
    """Write the trajectory JSON and its readable transcript next to each other."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    traj.save(stem.with_suffix(".json"))
    stem.with_suffix(".txt").write_text(render_transcript(traj))


async def _attempt(task: Any, cfg: Any, engine: Any, tokenizer: Any, attempt_id: str, grade: bool,
                   stem: Path) -> tuple[Trajectory, Any]:
    """Run, save the trajectory (before grading: a grader error still leaves it on disk), grade, save the score."""
    from fireflash.sandbox import make_backend

    backend = make_backend(cfg.sandbox)
    try:
        parent = await backend.prepare(task.environment, task.id)
        sandbox = await parent.fork()
        try:
            traj = await run_attempt(task, sandbox, engine, tokenizer, cfg.harness, attempt_id)
            _save(traj, stem)
            typer.echo(f"trajectory: {stem.with_suffix('.json')}\ntranscript: {stem.with_suffix('.txt')}")
            score = None
            if grade:
                from fireflash.grading.graders import make_grader

                score = await make_grader(task.grader).grade(task, sandbox)
                stem.with_suffix(".score.json").write_text(score.model_dump_json(indent=2))
            return traj, score
        finally:
            await sandbox.close()
    finally:
        await backend.close()
        close = getattr(engine, "close", None)  # not part of the Engine protocol; the local engine has a worker
        if close is not None:
            await close()


@app.command("run")
def run(
    task_dir: Path = TASK_DIR,
    engine: str | None = ENGINE,
    script: Path | None = SCRIPT,
    out: Path = OUT,
    attempt_id: str = typer.Option("attempt-0", help="Attempt id recorded in the trajectory."),
    grade: bool = typer.Option(True, help="Grade the final state with the task's grader."),
    config: Path | None = CONFIG,
    overrides: list[str] | None = OVERRIDES,
) -> None:
    """Run one attempt of TASK_DIR and write its trajectory JSON and a readable transcript."""
    from fireflash.config import ConfigError, load_config
    from fireflash.engines import make_engine
    from fireflash.models import load_tokenizer
    from fireflash.tasks.loader import TaskLoadError, load_task

    try:
        cfg = load_config(config, (overrides or []) + ([f"engine.kind={json.dumps(engine)}"] if engine else []))
        task = load_task(task_dir)
    except (ConfigError, TaskLoadError) as e:
        _fail(f"{type(e).__name__}: {e}")
    tokenizer = load_tokenizer(cfg.model.name_or_path, cfg.model.cache_dir)
    policy = make_engine(cfg.engine, cfg.model.name_or_path, tokenizer=tokenizer, script=_script(script),
                         cache_dir=cfg.model.cache_dir)
    stem = out / f"{task.id}-{attempt_id}"
    traj, score = asyncio.run(_attempt(task, cfg, policy, tokenizer, attempt_id, grade, stem))
    verdict = f" · reward {score.reward:.2f} ({'solved' if score.solved else 'not solved'})" if score is not None else ""
    typer.echo(f"{task.id}: {traj.status.value} ({traj.finish_reason}) in {traj.n_turns} turns{verdict}")
    if traj.error is not None:
        typer.echo(f"error: {traj.error.type}: {traj.error.message}", err=True)


@app.command("replay")
def replay(
    trajectory: Path = TRAJECTORY,
    max_chars: int | None = typer.Option(None, help="Cut each message to this many characters."),
) -> None:
    """Print a saved trajectory as a readable transcript."""
    try:
        traj = Trajectory.load(trajectory)
    except (OSError, ValueError) as e:
        _fail(f"{trajectory}: not a readable trajectory JSON ({e})")
    typer.echo(render_transcript(traj, max_chars), nl=False)
