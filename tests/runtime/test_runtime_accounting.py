"""The runtime's bookkeeping: engine busy time, metrics rows on resume, the bound on queued groups.

Fast and in process: an in-memory sandbox that records commands, a scripted engine, a trainer that only
counts. The end-to-end behaviour with real sandboxes and a real trainer is in test_local_runtime.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.models import build_tiny_tokenizer
from fireflash.protocols import ExecResult, GenerateRequest, Score, Task
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.local import LocalRuntime, MeteredEngine
from fireflash.tracking import MetricsWriter


class HeldEngine:
    """``generate`` waits until ``release`` is set."""

    weight_version = 0

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def generate(self, requests):
        await self.release.wait()
        return []


def test_engine_busy_time_counts_a_period_still_open():
    async def main():
        inner = HeldEngine()
        engine = MeteredEngine(inner)
        await asyncio.sleep(0.05)  # idle before the first request: not busy
        assert engine.busy_sec == 0.0
        request = asyncio.create_task(engine.generate([]))
        await asyncio.sleep(0.2)
        open_busy = engine.busy_sec  # never drained yet: an always-busy engine must not read as idle
        inner.release.set()
        await request
        closed = engine.busy_sec
        await asyncio.sleep(0.1)
        return open_busy, closed, engine.busy_sec

    open_busy, closed, later = asyncio.run(main())
    assert 0.15 < open_busy <= closed < 1.0
    assert later == closed  # idle time after the request does not count


def test_drop_after_removes_rows_past_the_checkpoint_and_a_torn_line(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    for step in (1, 2, 3, 4):
        writer.write(step, {"weight_version": float(step)})
    writer._file.write('{"step": 5, "weight_ver')  # a kill in the middle of a write
    writer._file.flush()
    assert writer.drop_after(2) == 3
    writer.write(3, {"weight_version": 3.0})
    writer.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]


class RecordingSandbox:
    """In-memory sandbox: every command succeeds at once and is recorded (forks start empty)."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    async def exec(self, command, timeout_sec=None, background=False, on_timeout="kill"):
        await asyncio.sleep(0)  # a real exec waits on I/O; without any await the workers would never yield
        self.commands.append(command)
        return ExecResult(exit_code=0, output_path="/tmp/out", output_size_bytes=0, preview="", duration_sec=0.0)

    async def fork(self):
        return RecordingSandbox()

    async def jobs(self):
        return []

    async def close(self):
        return None


class RecordingBackend:
    async def prepare(self, env, name):
        return RecordingSandbox()

    async def close(self):
        return None


class CommandGrader:
    """Solved when the attempt ran ``touch solved``."""

    async def grade(self, task, sandbox):
        solved = "touch solved" in sandbox.commands
        return Score(reward=float(solved), solved=solved, checks_passed=int(solved), checks_total=1)


class StallWatchingTrainer:
    """The Trainer surface LocalRuntime uses. Each step first waits until the queue is full and no attempt
    runs (the workers are held at the bound), then notes the queue's length, waits a little, and notes
    whether any attempt started meanwhile."""

    def __init__(self) -> None:
        self.step = self.weight_version = 0
        self.runtime = None
        self.seen: list[tuple[bool, int, int, int]] = []  # (stalled, queued, queued later, running later)

    def train_step(self, groups):
        rt, deadline = self.runtime, time.monotonic() + 20
        while (rt.running_attempts or len(rt.queue) < rt.queue.max_queued) and time.monotonic() < deadline:
            time.sleep(0.01)
        stalled, queued = rt.running_attempts == 0, len(rt.queue)
        time.sleep(0.1)
        self.seen.append((stalled, queued, len(rt.queue), rt.running_attempts))
        self.step += 1
        self.weight_version += 1
        return {"step_sec": 0.1}

    def state_dict(self):
        return {}

    def save_checkpoint(self, root, cursor):
        return root


def _script(request: GenerateRequest) -> str:
    attempt, turn = (int(x) for x in re.search(r"/a(\d+)#\d+-turn(\d+)", request.request_id).groups())
    if turn == 0:  # attempt 0 of each group solves: every group has signal
        command = "touch solved" if attempt == 0 else "true"
        return f'<tool_call>\n{{"name": "Bash", "arguments": {{"command": "{command}"}}}}\n</tool_call>'
    return "Done."


@pytest.mark.parametrize("max_queued", [2, None])
def test_workers_start_no_attempt_while_the_queue_is_full(tmp_path, max_queued):
    # attempts take milliseconds and the trainer holds each step until rollouts stall: unbounded, the
    # workers would never stall and the queue would grow without end
    tok = build_tiny_tokenizer()
    trainer = StallWatchingTrainer()
    objective = ObjectiveConfig(max_staleness=3)
    runtime = LocalRuntime(
        tasks=[Task(id="t", instruction="solve it")], backend=RecordingBackend(), engine=ScriptedEngine(tok, _script),
        tokenizer=tok, trainer=trainer, grader_for=lambda t: CommandGrader(),
        harness=HarnessConfig(max_turns=3, sampling=SamplingConfig(max_new_tokens_per_turn=64, n_top_logprobs=1)),
        objective=objective, run_dir=tmp_path, steps=4, group_size=2, groups_per_step=1, max_inflight_attempts=4,
        max_attempt_retries=0, discard_zero_signal_groups=True, seed=0, save_trajectories=False,
        max_queued_groups=max_queued,
    )
    trainer.runtime = runtime
    history = asyncio.run(runtime.run())
    assert [m["weight_version"] for m in history] == [1.0, 2.0, 3.0, 4.0]
    bound = max_queued or objective.max_staleness  # default: groups_per_step × max_staleness
    for stalled, queued, queued_later, running_later in trainer.seen:
        assert stalled and running_later == 0 and queued_later == queued
        # the bound counts groups still sampling too, so none opens past it: counting only the queued ones
        # let the attempts running at the bound finish inflight / group_size = 2 groups more (rl12's stale steps)
        assert queued == bound


def test_a_bound_below_one_step_is_refused(tmp_path):
    tok = build_tiny_tokenizer()
    with pytest.raises(ValueError, match="max_queued_groups=1 < groups_per_step=2"):
        LocalRuntime(
            tasks=[Task(id="t", instruction="x")], backend=RecordingBackend(), engine=ScriptedEngine(tok, _script),
            tokenizer=tok, trainer=StallWatchingTrainer(), grader_for=lambda t: CommandGrader(),
            harness=HarnessConfig(), objective=ObjectiveConfig(), run_dir=tmp_path, steps=1, group_size=2, groups_per_step=2,
            max_inflight_attempts=2, max_attempt_retries=0, discard_zero_signal_groups=True, seed=0,
            max_queued_groups=1,
        )


def test_a_window_without_graded_attempts_has_no_pass_rate():
    # a step whose window saw no attempt finish must not log pass rate 0 (the rl5 curve dropped to 0 every
    # other step); the counts are still logged, and the next window's means are its own
    from fireflash.runtime.loop import RolloutStats

    stats = RolloutStats()
    row = stats.take()
    assert row["rollout/attempts"] == 0.0 and row["groups/done"] == 0.0
    assert not {"rollout/pass_rate", "rollout/reward_mean", "groups/zero_signal_share"} & row.keys()
