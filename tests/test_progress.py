"""Progress lines of long jobs (progress.py): a plain line at least every interval without a terminal (issue #28)."""

import io

from rich.console import Console

from fireflash.progress import Progress, duration


class Clock:
    """Fake monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _plain(width: int = 200) -> tuple[io.StringIO, Console]:
    out = io.StringIO()
    return out, Console(file=out, force_terminal=False, width=width)


def test_without_a_terminal_a_line_at_start_at_every_interval_and_at_the_end():
    out, console = _plain()
    clock = Clock()
    # poll_sec: the heartbeat thread never wakes during the test; beat() stands in for it
    with Progress("sft steps", console, total=80, every_sec=30, clock=clock, poll_sec=3600) as progress:
        for step in range(1, 9):  # 8 steps of 20 s
            clock.now += 20
            progress.advance(info=f"loss {1 / step:.3f}")
            progress.beat()
    lines = out.getvalue().splitlines()
    assert lines[0] == "sft steps: 0/80, 0 s"
    # a line every 30 s of the fake clock: at 40, 80, 120 s (the beats after steps 2, 4, 6) and 160 s
    assert lines[1] == "sft steps: 2/80, 40 s, ETA 26 min 0 s  loss 0.500"
    assert [line.split(", ")[1] for line in lines[1:]] == ["40 s", "1 min 20 s", "2 min 0 s", "2 min 40 s", "2 min 40 s"]
    assert lines[-1] == "sft steps: 8/80, 2 min 40 s, ETA 24 min 0 s  loss 0.125"


def test_a_step_longer_than_the_interval_still_gets_lines():
    """The heartbeat, not the step, prints: one 95-s step shows three lines while it runs."""
    out, console = _plain()
    clock = Clock()
    with Progress("oracle replays", console, total=4, every_sec=30, clock=clock, poll_sec=3600) as progress:
        for _ in range(95):
            clock.now += 1
            progress.beat()
        progress.advance(info="1 solved")
    lines = out.getvalue().splitlines()
    assert [line for line in lines if line.startswith("oracle replays: 0/4")] == [
        "oracle replays: 0/4, 0 s", "oracle replays: 0/4, 30 s", "oracle replays: 0/4, 1 min 0 s",
        "oracle replays: 0/4, 1 min 30 s"]
    assert lines[-1] == "oracle replays: 1/4, 1 min 35 s, ETA 4 min 45 s  1 solved"


def test_eta_counts_only_steps_done_since_a_resume():
    _, console = _plain()
    clock = Clock()
    progress = Progress("sft steps", console, total=10, completed=6, clock=clock)
    clock.now += 50
    progress.advance()
    assert progress.text() == "sft steps: 7/10, 50 s, ETA 2 min 30 s"


def test_poll_reads_a_job_that_reports_nothing_itself():
    out, console = _plain()
    clock = Clock()
    state = {"step": 0}
    with Progress("train", console, total=4, every_sec=30, clock=clock, poll_sec=3600,
                  poll=lambda: (state["step"], f"{state['step'] * 5} attempts")) as progress:
        clock.now += 31
        state["step"] = 1
        progress.beat()
        state["step"] = 4
    assert out.getvalue().splitlines() == [
        "train: 0/4, 0 s  0 attempts", "train: 1/4, 31 s, ETA 1 min 33 s  5 attempts", "train: 4/4, 31 s  20 attempts"]


def test_the_heartbeat_thread_prints_while_the_job_blocks():
    """Real time, short interval: the thread, not the caller, prints the middle lines."""
    import time

    out, console = _plain()
    with Progress("building t", console, every_sec=0.05, poll_sec=0.01) as progress:
        progress.line("Step 3/7: RUN apt-get install [tree]")
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4 and all(line.startswith("building t: ") for line in lines)
    assert "RUN apt-get install [tree]" in lines[-1]  # never wrapped, brackets kept


def test_text_shortens_long_lines_and_durations_read_plainly():
    clock = Clock()
    progress = Progress("b", Console(file=io.StringIO()), clock=clock)
    clock.now += 42
    progress.line("x" * 300)
    text = progress.text()
    assert text.startswith("b: 42 s  xxx") and text.endswith("...") and len(text) < 120
    assert [duration(s) for s in (0.4, 59, 61, 3599, 3700)] == ["0 s", "59 s", "1 min 1 s", "59 min 59 s", "1 h 1 min"]


def test_in_a_terminal_a_bar_and_no_plain_lines():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    clock = Clock()
    with Progress("eval", console, total=3, every_sec=0.0, clock=clock, poll_sec=3600) as progress:
        progress.advance(info="1 solved")
        progress.beat()
    text = out.getvalue()
    assert "eval: " not in text and "1/3" in text and "1 solved" in text


def test_a_quiet_step_prints_only_when_it_runs_long():
    """announce=False (finding a task's image): nothing for a quick step, heartbeats for a long build."""
    out, console = _plain()
    clock = Clock()
    with Progress("image for t", console, every_sec=30, clock=clock, poll_sec=3600, announce=False) as progress:
        clock.now += 5
        progress.beat()
    assert out.getvalue() == ""
    with Progress("image for t", console, every_sec=30, clock=clock, poll_sec=3600, announce=False) as progress:
        progress.line("Step 2/5: RUN apt-get install -y git")
        clock.now += 31
        progress.beat()
    assert out.getvalue().splitlines() == ["image for t: 31 s  Step 2/5: RUN apt-get install -y git"]


def test_eta_counts_down_while_a_step_runs():
    _, console = _plain()
    clock = Clock()
    progress = Progress("sft steps", console, total=3, clock=clock)
    clock.now += 60
    progress.advance()
    assert progress.text() == "sft steps: 1/3, 1 min 0 s, ETA 2 min 0 s"
    clock.now += 45  # inside step 2: the estimate shrinks instead of growing with the elapsed time
    assert progress.text() == "sft steps: 1/3, 1 min 45 s, ETA 1 min 15 s"
