"""Progress of a long step (an image build, mmdebstrap) that neither hides it nor floods a log.

    with Progress("building my-task", console) as progress:
        task_image(path, cfg, on_line=progress.line)

In a terminal: a spinner showing the elapsed time and the step's latest output line. Otherwise (CI, a
pipe): one plain line every ``every_sec`` seconds with the same, so a silent step still shows it is alive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

from rich.console import Console
from rich.markup import escape


class Progress:
    """Shows ``label``, the elapsed seconds and the latest line passed to ``line`` while the block runs.

    Args:
        every_sec: interval between plain lines when the console is not a terminal, seconds.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, label: str, console: Console, every_sec: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.console, self.every_sec, self.clock = label, console, every_sec, clock
        self.last = ""
        self._start = clock()
        self._status = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def text(self) -> str:
        """The current progress line: label, elapsed seconds, latest output line (shortened)."""
        last = self.last.strip()
        last = last if len(last) <= 100 else last[:97] + "..."
        return f"{self.label}: {self.clock() - self._start:.0f} s" + (f"  {last}" if last else "")

    def line(self, text: str) -> None:
        """Record one output line of the step (called from any thread)."""
        self.last = text
        if self._status is not None:
            self._status.update(escape(self.text()))

    def _tick(self) -> None:
        while not self._stop.wait(self.every_sec):
            self.console.print(self.text(), markup=False, highlight=False, soft_wrap=True)

    def __enter__(self) -> Self:
        self._start = self.clock()
        if self.console.is_terminal:
            self._status = self.console.status(escape(self.text()))
            self._status.__enter__()
        else:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._status is not None:
            self._status.__exit__(kind, error, tb)
        if self._ticker is not None:
            self._ticker.join(timeout=5)
