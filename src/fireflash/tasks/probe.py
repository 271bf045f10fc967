"""Difficulty probing: train only where the model is unsure (RECIPE.md §2).

    fireflash tasks probe bundled:train --config configs/local.toml --out pool_manifest.json

Every candidate task gets ``attempts_per_task`` (≥ 4) scored attempts of the base policy under exactly
the training conditions — the same ``scored_attempt`` code path, harness config, engine and sandbox as
``fireflash train``. Tasks whose pass rate lies in [keep_min_pass_rate, keep_max_pass_rate] (15%–85%)
are kept. The pool manifest (JSON, ``PoolManifest``) lists every probed task with its pass rate,
attempts and mean tokens; ``fireflash train`` reads the kept ids with ``load_pool_manifest`` (set
``tasks.pool_manifest``).

Resumable: the manifest is rewritten after each task finishes, and a rerun skips tasks already in it.
A task with an attempt lost to infrastructure (after retries) is not recorded, so a rerun probes it
again. The manifest records the model and harness settings; resuming under other settings is refused.

Expected zero-signal share: a GRPO group of G attempts at a task with pass rate p carries no
solve/fail signal with probability p^G + (1-p)^G (all solve or all fail). The share before filtering
averages it over all probed tasks, after filtering over the kept ones, using the probe's pass rates as
p. This counts only solve/fail: partial credit can still separate unsolved attempts, so the measured
share in training can be lower. (Reference effect: 48% → 10.2%.)
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fireflash.protocols import SCHEMA_VERSION, Task

if TYPE_CHECKING:
    from fireflash.harness.config import HarnessConfig
    from fireflash.protocols import Engine, Grader, SandboxBackend
    from fireflash.runtime.attempts import AttemptOutcome

RATE_TOLERANCE = 1e-9  # 17/20 and 0.85 differ in the last float bit; a rate on the boundary is kept


class ProbedTask(BaseModel):
    """One probed task: its base-policy pass rate over the probe's attempts and whether it was kept."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    category: str = ""
    attempts: int = Field(description="Graded attempts.")
    passes: int = Field(description="Attempts that solved the task.")
    pass_rate: float = Field(description="passes / attempts.")
    mean_reward: float
    mean_n_input_tokens: float = Field(description="Prompt tokens per attempt, summed over turns.")
    mean_n_output_tokens: float = Field(description="Policy-sampled tokens per attempt.")
    kept: bool = Field(description="pass_rate within the keep range: enters the training pool.")


class PoolManifest(BaseModel):
    """The probe's result file; ``fireflash train`` trains only on ``kept`` tasks."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    model: str = Field(description="The base policy that was probed.")
    attempts_per_task: int
    keep_min_pass_rate: float
    keep_max_pass_rate: float
    group_size: int = Field(description="GRPO group size G used for the expected zero-signal shares.")
    harness: dict[str, Any] = Field(default_factory=dict, description="Harness config of every probe attempt.")
    updated_at: str = ""
    expected_zero_signal_before: float | None = Field(None, description="Mean p^G + (1-p)^G over all probed tasks.")
    expected_zero_signal_after: float | None = Field(None, description="The same over kept tasks.")
    tasks: list[ProbedTask] = Field(default_factory=list)

    @property
    def kept_ids(self) -> set[str]:
        return {t.task_id for t in self.tasks if t.kept}


def keep_task(passes: int, attempts: int, keep_min_pass_rate: float, keep_max_pass_rate: float) -> bool:
    """True if the pass rate ``passes / attempts`` lies in [keep_min, keep_max], boundaries included (RECIPE.md §2).

    Raises:
        ValueError: ``attempts < 1`` or ``passes`` outside [0, attempts].
    """
    if attempts < 1 or not 0 <= passes <= attempts:
        raise ValueError(f"need attempts >= 1 and 0 <= passes <= attempts; got passes={passes}, attempts={attempts}")
    rate = passes / attempts
    return keep_min_pass_rate - RATE_TOLERANCE <= rate <= keep_max_pass_rate + RATE_TOLERANCE


def zero_signal_probability(pass_rate: float, group_size: int) -> float:
    """P(a group of ``group_size`` attempts all solve or all fail) = p^G + (1-p)^G."""
    return pass_rate**group_size + (1.0 - pass_rate) ** group_size


def expected_zero_signal_share(pass_rates: Sequence[float], group_size: int) -> float | None:
    """Mean zero-signal probability over tasks; None for no tasks."""
    return fmean(zero_signal_probability(p, group_size) for p in pass_rates) if pass_rates else None


def read_manifest(path: str | Path) -> PoolManifest:
    """Load a pool manifest.

    Raises:
        FileNotFoundError: no file (run ``fireflash tasks probe`` first).
        ValueError: not a valid manifest; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: pool manifest not found; create it with `fireflash tasks probe TASKS --out {path}`")
    try:
        manifest = PoolManifest.model_validate_json(path.read_text())
    except ValidationError as e:
        raise ValueError(f"{path}: not a valid pool manifest ({e.error_count()} errors: {e.errors()[0]['msg']}); "
                         "re-create it with `fireflash tasks probe`") from None
    if manifest.schema_version > SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {manifest.schema_version} is newer than this FireFlash ({SCHEMA_VERSION})")
    return manifest


def load_pool_manifest(path: str | Path) -> set[str]:
    """Ids of the tasks the probe kept (the training pool). Raises as ``read_manifest``."""
    return read_manifest(path).kept_ids


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def refilter(manifest: PoolManifest) -> PoolManifest:
    """Recompute ``kept`` and the expected zero-signal shares from the stored counts; sort tasks by id."""
    manifest.tasks.sort(key=lambda t: t.task_id)
    for t in manifest.tasks:
        t.kept = keep_task(t.passes, t.attempts, manifest.keep_min_pass_rate, manifest.keep_max_pass_rate)
    rates = [t.pass_rate for t in manifest.tasks]
    manifest.expected_zero_signal_before = expected_zero_signal_share(rates, manifest.group_size)
    manifest.expected_zero_signal_after = expected_zero_signal_share([t.pass_rate for t in manifest.tasks if t.kept], manifest.group_size)
    manifest.updated_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return manifest


def probed_task(task: Task, outcomes: Sequence[AttemptOutcome], keep_min: float, keep_max: float) -> ProbedTask:
    """A task's probe record from its graded outcomes (none may be lost)."""
    passes = sum(o.score.solved for o in outcomes)
    return ProbedTask(
        task_id=task.id, category=str(task.metadata.get("category") or ""), attempts=len(outcomes), passes=passes,
        pass_rate=passes / len(outcomes), mean_reward=fmean(o.score.reward for o in outcomes),
        mean_n_input_tokens=fmean(o.trajectory.token_counts.n_input_tokens for o in outcomes),
        mean_n_output_tokens=fmean(o.trajectory.token_counts.n_output_tokens for o in outcomes),
        kept=keep_task(passes, len(outcomes), keep_min, keep_max),
    )


def _start_manifest(path: Path, fresh: PoolManifest) -> PoolManifest:
    """The manifest to extend: the existing file if its probe conditions match, else ``fresh``."""
    if not path.exists():
        return fresh
    old = read_manifest(path)
    for field in ("model", "attempts_per_task", "harness"):
        was, now = getattr(old, field), getattr(fresh, field)
        if was != now:
            if isinstance(was, dict):  # name the harness fields that differ, not the whole tree
                keys = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
                was, now = {k: was.get(k) for k in keys}, {k: now.get(k) for k in keys}
            raise ValueError(
                f"{path}: was probed with a different {field} ({was!r} vs now {now!r}); probe results are only "
                "comparable under the same conditions: pass another --out or restore the settings"
            )
    old.keep_min_pass_rate, old.keep_max_pass_rate = fresh.keep_min_pass_rate, fresh.keep_max_pass_rate
    old.group_size = fresh.group_size
    return old


async def probe_tasks(
    tasks: Sequence[Task],
    *,
    backend: SandboxBackend,
    engine: Engine,
    tokenizer: Any,
    harness: HarnessConfig,
    grader_for: Callable[[Task], Grader],
    attempts_per_task: int,
    keep_min_pass_rate: float,
    keep_max_pass_rate: float,
    group_size: int,
    max_concurrent: int,
    max_retries: int,
    manifest_path: Path,
    model: str,
    show_progress: bool = True,
) -> tuple[PoolManifest, list[str]]:
    """Probe the tasks not yet in ``manifest_path``; update and return the manifest (RECIPE.md §2).

    Returns:
        (manifest, unprobed): ``unprobed`` lists tasks with an attempt lost to infrastructure; they are
        left out of the manifest so a rerun probes them again.

    Raises:
        ValueError: the existing manifest was probed under another model, attempt count or harness config.
    """
    from rich.console import Console

    from fireflash.evaluation.trials import run_trials
    from fireflash.progress import Progress

    manifest_path = Path(manifest_path)
    manifest = _start_manifest(manifest_path, PoolManifest(
        model=model, attempts_per_task=attempts_per_task, keep_min_pass_rate=keep_min_pass_rate,
        keep_max_pass_rate=keep_max_pass_rate, group_size=group_size, harness=harness.model_dump(mode="json"),
    ))
    done = {t.task_id for t in manifest.tasks}
    todo = [t for t in tasks if t.id not in done]
    pending: dict[str, list[AttemptOutcome]] = {t.id: [] for t in todo}
    unprobed: list[str] = []
    _write_atomic(manifest_path, refilter(manifest).model_dump_json(indent=1))

    with Progress("probe attempts", Console(quiet=not show_progress), total=len(todo) * attempts_per_task) as progress:

        def record(task: Task, _index: int, outcome: AttemptOutcome) -> None:
            progress.advance()
            outs = pending[task.id]
            outs.append(outcome)
            if len(outs) < attempts_per_task:
                return
            if any(o.lost for o in outs):
                unprobed.append(task.id)
                progress.update(info=f"{task.id}: attempt lost to infrastructure, will retry on rerun")
                return
            entry = probed_task(task, outs, manifest.keep_min_pass_rate, manifest.keep_max_pass_rate)
            manifest.tasks.append(entry)
            _write_atomic(manifest_path, refilter(manifest).model_dump_json(indent=1))
            kept = sum(t.kept for t in manifest.tasks)
            progress.update(info=f"{kept} kept; {task.id}: {entry.passes}/{entry.attempts} {'kept' if entry.kept else 'dropped'}")

        await run_trials(
            todo, attempts_per_task, backend=backend, engine=engine, tokenizer=tokenizer, harness=harness,
            grader_for=grader_for, max_concurrent=max_concurrent, max_retries=max_retries, attempt_prefix="probe",
            on_outcome=record,
        )
    return manifest, unprobed
