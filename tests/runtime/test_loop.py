"""The loop both backends run (runtime.loop.RLLoop), driven through fake hooks: fast, in process, no Ray.

``LocalRuntime`` and ``RayRuntime`` are both ``LoopHooks`` of an ``RLLoop``, so what is checked here with fake
hooks is the code either backend runs: the wall limit checked before queued groups are taken, the checkpoint
at the wall limit, skipped steps for batches the trainer refuses, and the entropy history carried in the
checkpoint's cursor. The LocalRuntime test at the end checks the entropy history across a resume end to end.
"""

from __future__ import annotations

import asyncio

import pytest
from fake_loop import FakeLoopHooks
from test_runtime_accounting import CommandGrader, RecordingBackend, _script

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.models import build_tiny_tokenizer
from fireflash.protocols import Task
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.groups import Slot
from fireflash.runtime.local import LocalRuntime
from fireflash.runtime.loop import LoopHooks, RLLoop, TrainingStalled
from fireflash.runtime.placement import Placement
from fireflash.runtime.ray_backend import RayRuntime
from fireflash.tracking import MetricsWriter, read_metrics
from fireflash.training.batch import AllTokensStale

pytestmark = pytest.mark.unit
TASK = Task(id="t", instruction="solve it")


class FakeHooks(FakeLoopHooks):
    """Instant attempts (attempt 0 of a group solves, so every group trains); steps that take ``step_sec`` of
    event-loop time and report ``entropies[i]``; records what the loop asked for."""

    tokens = 3

    def __init__(self, step_sec: float = 0.0, entropies=(), refuse_steps=(), step: int = 0) -> None:
        super().__init__(step)
        self.step_sec, self.entropies, self.refuse_steps = step_sec, list(entropies), set(refuse_steps)
        self.loop: RLLoop | None = None
        self.batches_taken = 0
        self.queued_at_step_end: list[int] = []
        self.published: list[int] = []

    def solved(self, slot: Slot) -> bool:
        return slot.index == 0

    async def train_step(self, groups):
        self.batches_taken += 1
        await asyncio.sleep(self.step_sec)
        if self.batches_taken in self.refuse_steps:
            raise AllTokensStale("every sampled token is stale")
        # a batch is ready when the step ends: taking the next one would not wait
        while len(self.loop.queue) < self.loop.queue.groups_per_step:
            await asyncio.sleep(0.01)
        self.queued_at_step_end.append(len(self.loop.queue))
        self.step += 1
        self.weight_version += 1
        entropy = self.entropies[self.step - 1] if self.entropies else 1.0
        return {"step_sec": self.step_sec, "entropy/mean": entropy}

    async def publish_weights(self):
        self.published.append(self.weight_version)

    async def save_checkpoint(self, cursor):
        self.checkpoints.append((self.step, cursor))


def _loop(hooks, tmp_path, *, steps, objective=None, cursor=None, **kw) -> RLLoop:
    loop = RLLoop(
        hooks, tasks=[TASK], group_size=2, seed=0, objective=objective or ObjectiveConfig(), run_dir=tmp_path,
        steps=steps, groups_per_step=1, max_inflight_attempts=2, discard_zero_signal_groups=True,
        writer=MetricsWriter(tmp_path, tensorboard=False), save_trajectories=False, **kw,
    )
    hooks.loop = loop
    loop.load_cursor(cursor)
    return loop


def test_both_backends_are_hooks_of_the_shared_loop(tmp_path):
    tok = build_tiny_tokenizer()
    local = LocalRuntime(
        tasks=[TASK], backend=RecordingBackend(), engine=ScriptedEngine(tok, _script), tokenizer=tok,
        trainer=FakeHooks(), grader_for=lambda t: CommandGrader(), harness=HarnessConfig(), objective=ObjectiveConfig(),
        run_dir=tmp_path, steps=1, group_size=2, groups_per_step=1, max_inflight_attempts=2, max_attempt_retries=0,
        discard_zero_signal_groups=True, seed=0,
    )
    placement = Placement(
        num_nodes=1, gpus_per_node=0, trainer_workers=1, gpus_per_trainer_worker=0, cpus_per_trainer_worker=1,
        engine_kind="scripted", engines=1, gpus_per_engine=0, engines_in_workers=True, rollout_workers=1,
        cpus_per_rollout_worker=1, attempts_per_worker=2,
    )
    ray = RayRuntime(
        tasks=[TASK], build_rollout=None, build_trainer=None, placement=placement, harness=HarnessConfig(),
        objective=ObjectiveConfig(), run_dir=tmp_path, steps=1, group_size=2, groups_per_step=1,
        max_inflight_attempts=2, max_attempt_retries=0, discard_zero_signal_groups=True, seed=0,
    )
    for runtime in (local, ray):
        assert isinstance(runtime, LoopHooks) and isinstance(runtime.loop, RLLoop) and runtime.loop.hooks is runtime
        assert runtime.queue is runtime.loop.queue and runtime.history is runtime.loop.history


def test_the_wall_limit_stops_before_queued_groups_are_taken_and_checkpoints_there(tmp_path):
    # step 1 outlasts the limit while the slot loops queue groups: the loop must not take them (take() would return
    # at once), and step 1, not due for a periodic checkpoint, is saved on the way out
    hooks = FakeHooks(step_sec=0.6)
    loop = _loop(hooks, tmp_path, steps=5, max_wall_sec=0.3, checkpoint_every_steps=10, max_queued_groups=8)
    history = asyncio.run(loop.run())

    assert hooks.queued_at_step_end and hooks.queued_at_step_end[0] >= 1
    assert hooks.batches_taken == 1 and hooks.step == 1 and len(history) == 1
    assert loop.stopped_at_wall_limit and len(loop.queue) >= 1
    assert [step for step, _ in hooks.checkpoints] == [1]
    cursor = hooks.checkpoints[0][1]
    assert set(loop.queue.group_ids()) <= {int(g) for g in cursor["unfinished"]}  # queued groups rerun on resume
    assert [r["step"] for r in read_metrics(tmp_path)] == [1]


def test_a_refused_batch_is_a_skipped_step_counted_in_the_next_row(tmp_path):
    hooks = FakeHooks(refuse_steps={2})  # the second batch: every token stale
    loop = _loop(hooks, tmp_path, steps=3)
    history = asyncio.run(loop.run())

    assert hooks.batches_taken == 4 and hooks.step == 3
    assert hooks.published == [1, 2, 3]  # nothing published for the refused batch
    assert [step for step, _ in hooks.checkpoints] == [1, 2, 3]
    assert [m["trainer/skipped_steps"] for m in history] == [0.0, 1.0, 0.0]
    assert [m["weight_version"] for m in history] == [1.0, 2.0, 3.0]
    assert loop.entropy_history == [1.0, 1.0, 1.0]  # a skipped step has no entropy


def test_batches_refused_for_ever_stop_the_run_instead_of_spinning(tmp_path):
    # an engine that tags every turn with a wrong version: each batch is all stale, now and for ever
    hooks = FakeHooks(refuse_steps=range(1, 10_000))
    loop = _loop(hooks, tmp_path, steps=3)
    # default queue bound: groups_per_step × max_staleness groups, i.e. max_staleness (6) batches, plus one
    with pytest.raises(TrainingStalled, match="refused 7 batches in a row after step 0"):
        asyncio.run(asyncio.wait_for(loop.run(), 30))
    assert hooks.batches_taken == 7
    assert hooks.published == [] and hooks.checkpoints == [] and hooks.step == 0


def test_the_entropy_history_travels_in_the_checkpoint_cursor(tmp_path):
    objective = ObjectiveConfig(entropy_window_steps=2, entropy_rise_threshold=0.05)
    first = FakeHooks(entropies=[1.0, 0.5, 0.5])
    asyncio.run(_loop(first, tmp_path / "a", steps=3, objective=objective).run())
    cursor = first.checkpoints[-1][1]
    assert cursor["entropy_history"] == [1.0, 0.5, 0.5] and "next_group" in cursor

    resumed = FakeHooks(entropies=[1.0, 0.5, 0.5, 0.9], step=3)
    loop = _loop(resumed, tmp_path / "b", steps=4, objective=objective, cursor=cursor)
    history = asyncio.run(loop.run())
    # windows of 2 over [1.0, 0.5, 0.5, 0.9]: lowest 0.5, now 0.7; on the resumed history alone there is no window
    assert history[0]["entropy/rise"] == pytest.approx(0.2) and history[0]["entropy/warning"] == 1.0
    assert loop.entropy_history == [1.0, 0.5, 0.5, 0.9]


class EntropyTrainer:
    """The Trainer surface LocalRuntime uses: steps that report ``entropies``, checkpoints kept in memory."""

    def __init__(self, entropies, step=0):
        self.step = self.weight_version = step
        self.entropies = entropies
        self.cursors: list[dict] = []

    def train_step(self, groups):
        self.step += 1
        self.weight_version += 1
        return {"step_sec": 0.0, "entropy/mean": self.entropies[self.step - 1]}

    def state_dict(self):
        return {}

    def save_checkpoint(self, root, cursor):
        self.cursors.append(cursor)
        return root


def _local(tmp_path, trainer, steps, cursor=None):
    tok = build_tiny_tokenizer()
    return LocalRuntime(
        tasks=[TASK], backend=RecordingBackend(), engine=ScriptedEngine(tok, _script), tokenizer=tok, trainer=trainer,
        grader_for=lambda t: CommandGrader(),
        harness=HarnessConfig(max_turns=3, sampling=SamplingConfig(max_new_tokens_per_turn=64, n_top_logprobs=1)),
        objective=ObjectiveConfig(entropy_window_steps=2, entropy_rise_threshold=0.05), run_dir=tmp_path, steps=steps,
        group_size=2, groups_per_step=1, max_inflight_attempts=2, max_attempt_retries=0, discard_zero_signal_groups=True,
        seed=0, save_trajectories=False, cursor=cursor, writer=MetricsWriter(tmp_path, tensorboard=False),
    )


def test_the_entropy_rise_detector_sees_the_steps_before_a_resume(tmp_path):
    entropies = [1.0, 0.5, 0.5, 0.9]
    first = EntropyTrainer(entropies)
    asyncio.run(_local(tmp_path, first, steps=3).run())
    cursor = first.cursors[-1]  # what --resume reads back (Trainer.restore returns the saved cursor)

    history = asyncio.run(_local(tmp_path, EntropyTrainer(entropies, step=3), steps=4, cursor=cursor).run())
    # windows of 2 over [1.0, 0.5, 0.5, 0.9]; a run that forgot steps 1-3 has no full window yet (rise 0.0)
    assert history[0]["entropy/rise"] == pytest.approx(0.2), "the resumed run forgot the entropy of steps 1-3"
    assert history[0]["entropy/warning"] == 1.0
