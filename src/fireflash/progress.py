"""Progress of a long job (SFT steps, training, probing, evaluation, gates, an image build) that neither hides
it nor floods a log (issue #28).

    with Progress("sft steps", console, total=len(steps)) as progress:
        for batch in steps:
            metrics = trainer.step(batch)
            progress.advance(info=f"loss {metrics['loss']:.3f}")

In a terminal: a rich bar (a spinner while the total is unknown) with the latest info, elapsed time and ETA.
Otherwise (``make train > log 2>&1``, CI, a pipe): one plain line when the job starts, then one at least every
``every_sec`` seconds while it runs, and one when it ends::

    sft steps: 12/80, 4 min 2 s, ETA 22 min 50 s  loss 0.412 acc 0.87

The lines come from a heartbeat thread, so a single step longer than ``every_sec`` still shows the job is
alive. ``line`` records a step's latest output line (image builds) as the info; ``poll`` reads the state of a
job whose loop reports nothing itself (``fireflash train``'s runtime).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress


def duration(seconds: float) -> str:
    """``seconds`` as '42 s', '4 min 2 s' or '1 h 3 min'."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class Progress:
    """Shows ``label``, steps done of ``total``, elapsed time, ETA and the latest info while the block runs.

    Args:
        label: what runs, e.g. ``"sft steps"`` or ``"building my-task"``.
        console: where lines go; its ``is_terminal`` chooses a rich bar or plain lines.
        total: steps the job has (None: unknown, no ETA).
        completed: steps already done when the block starts (a resumed run); the ETA uses only the steps
            done since.
        every_sec: longest gap between plain lines when the console is not a terminal, seconds.
        clock: monotonic seconds (injectable for tests).
        poll: called at every heartbeat for ``(completed, info)`` of a job that does not call ``update``.
        poll_sec: how often the heartbeat thread wakes, seconds (a plain line's gap is at most
            ``every_sec + poll_sec``).
        announce: print the start and end lines (False: heartbeats only, and a bar that disappears, for a
            step that is usually quick, e.g. finding a task's cached image, and only sometimes long).
    """

    def __init__(self, label: str, console: Console, total: int | None = None, completed: int = 0,
                 every_sec: float = 25.0, clock: Callable[[], float] = time.monotonic,
                 poll: Callable[[], tuple[int, str]] | None = None, poll_sec: float = 1.0,
                 announce: bool = True) -> None:
        self.label, self.console, self.total, self.completed = label, console, total, completed
        self.every_sec, self.clock, self.poll, self.poll_sec = every_sec, clock, poll, poll_sec
        self.announce = announce
        self.info = ""
        self._first = completed
        self._start = self._printed = self._done_at = clock()
        self._bar: RichProgress | None = None
        self._bar_task = 0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def text(self) -> str:
        """The plain progress line: label, done/total, elapsed, ETA, latest info (shortened to 100 characters)."""
        elapsed = self.clock() - self._start
        parts = [f"{self.completed}/{self.total}" if self.total is not None else
                 (f"{self.completed} done" if self.completed else ""), duration(elapsed)]
        done_now = self.completed - self._first
        if self.total is not None and 0 < done_now and self.completed < self.total:
            # the pace of the steps done so far, less the time the current step has already run
            per_step = (self._done_at - self._start) / done_now
            eta = (self.total - self.completed) * per_step - (self.clock() - self._done_at)
            parts.append(f"ETA {duration(max(0.0, eta))}")
        info = self.info.strip()
        info = info if len(info) <= 100 else info[:97] + "..."
        return f"{self.label}: {', '.join(p for p in parts if p)}" + (f"  {info}" if info else "")

    def update(self, completed: int | None = None, info: str | None = None) -> None:
        """Set the steps done and/or the info (a key metric, the latest output line); any thread."""
        if completed is not None and completed != self.completed:
            self.completed, self._done_at = completed, self.clock()
        if info is not None:
            self.info = info
        if self._bar is not None:
            self._bar.update(self._bar_task, completed=self.completed, info=escape(self.info))

    def advance(self, steps: int = 1, info: str | None = None) -> None:
        """Count ``steps`` more steps done, optionally with a new info."""
        self.update(self.completed + steps, info)

    def line(self, text: str) -> None:
        """Record one output line of the step as the info (an ``on_line`` callback; any thread)."""
        self.update(info=text)

    def beat(self) -> None:
        """Poll the job if it has ``poll``; without a terminal print the line when ``every_sec`` has passed
        since the last one. The heartbeat thread calls it every ``poll_sec``; tests call it with a fake clock."""
        if self.poll is not None:
            self.update(*self.poll())
        if self._bar is None and self.clock() - self._printed >= self.every_sec:
            self._print()

    def _print(self) -> None:
        self._printed = self.clock()
        # output lines hold brackets (apt, pip), never markup
        self.console.print(self.text(), markup=False, highlight=False, soft_wrap=True)

    def _tick(self) -> None:
        while not self._stop.wait(self.poll_sec):
            self.beat()

    def __enter__(self) -> Self:
        self._start = self._printed = self._done_at = self.clock()
        if self.poll is not None:
            self.update(*self.poll())
        if self.console.is_terminal:
            counted = (BarColumn(), MofNCompleteColumn()) if self.total is not None else (SpinnerColumn(),)
            self._bar = RichProgress(TextColumn(escape(self.label)), *counted, TextColumn("{task.fields[info]}"),
                                     TimeElapsedColumn(), *((TimeRemainingColumn(),) if self.total is not None else ()),
                                     console=self.console, transient=not self.announce)
            self._bar.start()
            self._bar_task = self._bar.add_task(self.label, total=self.total, completed=self.completed,
                                                info=escape(self.info))
        elif self.announce:
            self._print()
        self._ticker = threading.Thread(target=self._tick, daemon=True, name=f"progress {self.label}")
        self._ticker.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        if self.poll is not None:
            self.update(*self.poll())
        if self._bar is not None:
            self._bar.stop()
        elif self.announce:
            self._print()
