"""``fireflash agent ...``: run one attempt on a task directory, or replay a saved trajectory.

    fireflash agent run TASK_DIR [--engine local|scripted|sglang|vllm] [--script turns.json] [--out DIR] [a.b=v ...]
    fireflash agent replay TRAJECTORY.json

``run`` builds the task's parent sandbox, forks it, calls ``run_attempt`` (the same function training,
probing and evaluation use), writes ``<task>-<attempt>.json`` (the trajectory) and ``<task>-<attempt>.txt``
(a transcript) into ``--out``, then grades a fork of the final state (``--no-grade`` skips it) and writes
``<task>-<attempt>.score.json``. The trajectory is on disk before grading starts, so a grader that fails or
hangs never loses the attempt. Bad inputs (attempt id, ``--out``, engine settings) are refused before any
sandbox starts.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import typer

from fireflash.harness.agent import run_attempt
from fireflash.harness.transcript import escape_controls, render_transcript
from fireflash.protocols import Trajectory

TASK_DIR = typer.Argument(..., help="Task directory (task.toml or task.yaml).")
ENGINE = typer.Option(None, help="Engine kind: local, scripted, sglang, vllm (default: engine.kind).")
SCRIPT = typer.Option(None, help="JSON list of assistant texts for --engine scripted.")
OUT = typer.Option(Path("runs/agent"), help="Directory for the trajectory, transcript and score.")
CONFIG = typer.Option(None, "--config", "-c", help="TOML config file (default: built-in defaults).")
OVERRIDES = typer.Argument(None, help="Overrides as KEY.PATH=VALUE, e.g. harness.max_turns=5.")
TRAJECTORY = typer.Argument(..., help="A trajectory JSON written by `agent run` or a training run.")
ATTEMPT_ID = typer.Option("attempt-0", help="Attempt id recorded in the trajectory and used in the file names "
                                            "(letters, digits, '.', '_', '-').")
# the attempt id becomes part of file names: no path separator, no leading dot or dash, nothing a shell mangles
_SAFE_ATTEMPT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

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
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        _fail(f"--script {path}: expected a non-empty JSON list of strings, one assistant turn each")
    return turns


def output_paths(out: Path, task_id: str, attempt_id: str) -> dict[str, Path]:
    """The files of one attempt: ``<task>-<attempt>`` plus a suffix appended to the whole name.

    Appended, not ``Path.with_suffix``: that would replace everything after the last dot, so attempts
    ``run.1`` and ``run.2`` would both write ``<task>-run.json``.
    """
    stem = f"{task_id}-{attempt_id}"
    return {kind: out / f"{stem}{suffix}" for kind, suffix in
            (("trajectory", ".json"), ("transcript", ".txt"), ("score", ".score.json"))}


def _check_attempt_id(attempt_id: str) -> None:
    if not _SAFE_ATTEMPT_ID.fullmatch(attempt_id):
        _fail(f"--attempt-id {attempt_id!r}: it names the output files, so use only letters, digits, '.', '_' and "
              "'-', starting with a letter or digit (at most 128 characters), e.g. --attempt-id run.2")


def _check_out(out: Path) -> None:
    """Create ``--out`` and prove it writable now, not after the attempt ran."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        _fail(f"--out {out}: cannot create or write this directory ({e.strerror or e}); pass a writable directory")


def _check_engine(kind: str, script: Path | None, url: str | None) -> None:
    if kind == "scripted" and script is None:
        _fail("--engine scripted needs --script TURNS.json: a JSON list of assistant texts, one per turn")
    if kind in ("sglang", "vllm") and not url:
        _fail(f"engine.kind = {kind!r} needs the server's address: add the override engine.url=http://HOST:PORT "
              "(or set url in the [engine] section of --config)")


def _save(traj: Trajectory, paths: dict[str, Path]) -> None:
    """Write the trajectory JSON and its readable transcript next to each other."""
    paths["trajectory"].parent.mkdir(parents=True, exist_ok=True)
    traj.save(paths["trajectory"])
    paths["transcript"].write_text(render_transcript(traj))


async def _attempt(task: Any, cfg: Any, engine: Any, tokenizer: Any, attempt_id: str, grade: bool,
                   paths: dict[str, Path]) -> tuple[Trajectory, Any]:
    """Run, save the trajectory (before grading: a grader error still leaves it on disk), grade, save the score."""
    from fireflash.sandbox import make_backend

    backend = make_backend(cfg.sandbox)
    try:
        parent = await backend.prepare(task.environment, task.id)
        sandbox = await parent.fork()
        try:
            traj = await run_attempt(task, sandbox, engine, tokenizer, cfg.harness, attempt_id)
            _save(traj, paths)
            typer.echo(f"trajectory: {paths['trajectory']}\ntranscript: {paths['transcript']}")
            score = None
            if grade:
                from fireflash.grading.graders import make_grader

                score = await make_grader(task.grader).grade(task, sandbox)
                paths["score"].write_text(score.model_dump_json(indent=2))
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
    attempt_id: str = ATTEMPT_ID,
    grade: bool = typer.Option(True, help="Grade the final state with the task's grader."),
    config: Path | None = CONFIG,
    overrides: list[str] | None = OVERRIDES,
) -> None:
    """Run one attempt of TASK_DIR and write its trajectory JSON and a readable transcript."""
    from fireflash.config import ConfigError, load_config
    from fireflash.engines import make_engine
    from fireflash.models import load_tokenizer
    from fireflash.tasks.loader import TaskLoadError, load_task

    _check_attempt_id(attempt_id)
    try:
        cfg = load_config(config, (overrides or []) + ([f"engine.kind={json.dumps(engine)}"] if engine else []))
        task = load_task(task_dir, sandbox=cfg.sandbox)
    except (ConfigError, TaskLoadError) as e:
        _fail(f"{type(e).__name__}: {e}")
    _check_engine(cfg.engine.kind, script, cfg.engine.url)
    turns = _script(script)
    _check_out(out)
    tokenizer = load_tokenizer(cfg.model.name_or_path, cfg.model.cache_dir)
    policy = make_engine(cfg.engine, cfg.model.name_or_path, tokenizer=tokenizer, script=turns,
                         cache_dir=cfg.model.cache_dir)
    paths = output_paths(out, task.id, attempt_id)
    traj, score = asyncio.run(_attempt(task, cfg, policy, tokenizer, attempt_id, grade, paths))
    verdict = f" · reward {score.reward:.2f} ({'solved' if score.solved else 'not solved'})" if score is not None else ""
    typer.echo(f"{task.id}: {traj.status.value} ({traj.finish_reason}) in {traj.n_turns} turns{verdict}")
    if traj.error is not None:
        typer.echo(escape_controls(f"error: {traj.error.type}: {traj.error.message}"), err=True)


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
