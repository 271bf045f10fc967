"""Progress lines of long steps (tasks/progress.py)."""

import io
import time

from rich.console import Console

from fireflash.tasks.progress import Progress


def test_without_a_terminal_a_plain_line_every_interval():
    out = io.StringIO()
    with Progress("building t", Console(file=out, force_terminal=False, width=40), every_sec=0.05) as progress:
        progress.line("Step 3/7: RUN apt-get install [tree]")
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("building t: ") for line in lines)
    assert "RUN apt-get install [tree]" in lines[-1]  # never wrapped, brackets kept


def test_text_shows_elapsed_seconds_and_shortens_long_lines():
    now = [100.0]
    progress = Progress("b", Console(file=io.StringIO()), clock=lambda: now[0])
    now[0] = 142.0
    progress.line("x" * 300)
    text = progress.text()
    assert text.startswith("b: 42 s  xxx") and text.endswith("...") and len(text) < 120
