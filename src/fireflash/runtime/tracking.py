"""Run metrics: one JSON line per step in ``metrics.jsonl`` plus TensorBoard event files.

``metrics.jsonl`` is the source of truth (reports and plots read it); TensorBoard is for watching.
Lines are appended and flushed per step, so a killed run keeps every finished step; a resumed run first
drops the rows past its checkpoint (``drop_after``), so each step appears once.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


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
        kept = [line for line in lines if line.endswith("\n") and line.strip() and json.loads(line)["step"] <= step]
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
    """All rows of ``run_dir/metrics.jsonl``; on resume a step may appear twice, the last one wins."""
    rows: dict[int, dict[str, Any]] = {}
    path = Path(run_dir) / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        if line.strip():
            row = json.loads(line)
            rows[row["step"]] = row
    return [rows[s] for s in sorted(rows)]
