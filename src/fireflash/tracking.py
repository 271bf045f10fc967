"""Run metrics: one JSON line per step in ``metrics.jsonl`` plus TensorBoard event files.

``metrics.jsonl`` is the source of truth (reports and plots read it); TensorBoard is for watching.
Lines are appended and flushed per step, so a killed run keeps every finished step; a resumed run first
drops the rows past its checkpoint (``drop_after``), so each step appears once. A fresh run refuses a
directory that already holds a run (``refuse_existing_run``), so nothing is overwritten.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("fireflash.tracking")


class MetricsError(ValueError):
    """A metrics.jsonl line is not a JSON object with an integer "step"; the message names file and line."""


class RunDirInUse(FileExistsError):
    """A fresh run was pointed at a directory that already holds a run (its checkpoints or metrics)."""


def refuse_existing_run(run_dir: Path, field: str) -> None:
    """Raise ``RunDirInUse`` if ``run_dir`` holds a checkpoint (``checkpoints/latest``) or a non-empty metrics.jsonl.

    A fresh run there would replace its checkpoints and rewrite its metrics. ``field`` is the config field
    naming the directory (``tracking.run_dir``, ``sft.run_dir``), for the fix.
    """
    run_dir = Path(run_dir)
    checkpoints = run_dir / "checkpoints"
    metrics = run_dir / "metrics.jsonl"
    has_checkpoint = (checkpoints / "latest").is_file()  # what --resume continues from
    has_metrics = metrics.is_file() and metrics.stat().st_size > 0
    if has_checkpoint:
        held = "checkpoints/" + (" and metrics.jsonl" if has_metrics else "")
        raise RunDirInUse(f"{run_dir} already holds a run ({held}); pass --resume to continue it or set {field} "
                          "to a new directory")
    if has_metrics:
        raise RunDirInUse(f"{run_dir} already holds a run's metrics.jsonl but no checkpoint to resume from; set "
                          f"{field} to a new directory, or delete {metrics} to start over there")


def _parse_rows(path: Path, lines: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(line, row) of each metrics line; a last line cut off by a kill is skipped with a warning.

    Raises:
        MetricsError: any other line that is not a JSON object with an integer "step" (names file and line).
    """
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if i == last:
                log.warning("%s:%d: skipped a truncated last line (a run killed while writing it)", path, i + 1)
                continue
            raise MetricsError(f"{path}:{i + 1}: not valid JSON ({e.msg}); fix or delete that line") from None
        if not isinstance(row, dict) or type(row.get("step")) is not int:
            raise MetricsError(f'{path}:{i + 1}: a metrics row needs an integer "step"; fix or delete that line')
        rows.append((line, row))
    return rows


class MetricsWriter:
    """Append step metrics to ``run_dir/metrics.jsonl`` (and ``run_dir/tensorboard/`` when enabled)."""

    def __init__(self, run_dir: Path, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step} | {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}
        self._file.write(json.dumps(row, allow_nan=True) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def drop_after(self, step: int) -> int:
        """Remove the rows of steps after ``step``; returns how many were removed.

        A resumed run calls it with the checkpoint's step: rows a killed run wrote past its last checkpoint
        describe steps that are run again, and must not appear twice (a fresh run, step 0, starts the file
        afresh). A last line torn by the kill (no newline) goes too. The file is replaced atomically.
        """
        self._file.close()
        lines = self.path.read_text().splitlines(keepends=True)
        rows = _parse_rows(self.path, [line for line in lines if line.endswith("\n")])  # a torn last line goes
        kept = [line for line, row in rows if row["step"] <= step]
        if len(kept) != len(lines):
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text("".join(kept))
            os.replace(tmp, self.path)
        self._file = self.path.open("a")
        return len(lines) - len(kept)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All rows of ``run_dir/metrics.jsonl`` (none if it is missing); a step logged twice keeps its last row.

    A last line cut off by a kill is skipped with a warning naming file and line.

    Raises:
        MetricsError: another line is not JSON, or a row has no integer "step" (the message names file and line).
    """
    path = Path(run_dir) / "metrics.jsonl"
    rows = {row["step"]: row for _, row in _parse_rows(path, path.read_text().splitlines() if path.is_file() else [])}
    return [rows[s] for s in sorted(rows)]
