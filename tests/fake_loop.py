"""A fake backend for ``fireflash.runtime.loop.RLLoop``: the ``LoopHooks`` tests drive the loop with, in process.

``FakeLoopHooks`` fakes what ``LocalRuntime`` and ``RayRuntime`` supply to the loop: instant attempts (one turn of
``tokens`` tokens, the sampled ones tagged with the current ``weight_version``, graded by ``solved``: by default
even attempt indices solve), instant train steps that advance ``step`` and ``weight_version``, a no-op weight
publish, checkpoint cursors kept in ``checkpoints``, and one idle engine. Test files subclass it and override
``solved``, ``outcome`` (called after the attempt's one yield, to record what was drawn) or the methods they check.

Not a test module: pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in pyproject.toml), so any test file
does ``from fake_loop import FakeLoopHooks``.
"""

from __future__ import annotations

import asyncio

from fireflash.protocols import Score, Segment, Trajectory
from fireflash.rollout.attempts import AttemptOutcome
from fireflash.runtime.groups import Slot


class FakeLoopHooks:
    """Instant attempts solved by ``solved`` and instant steps; records the checkpoint cursors."""

    tokens = 2  # per trajectory: one prompt token, then sampled ones

    def __init__(self, step: int = 0) -> None:
        self.step = self.weight_version = step
        self.checkpoints: list = []

    def solved(self, slot: Slot) -> bool:
        return slot.index % 2 == 0

    def outcome(self, slot: Slot) -> AttemptOutcome:
        n, version = self.tokens, self.weight_version
        seg = Segment(token_ids=list(range(1, n + 1)), loss_mask=[0] + [1] * (n - 1),
                      rollout_logprobs=[0.0] + [-1.0] * (n - 1), topk_ids=[[]] + [[i] for i in range(2, n + 1)],
                      topk_logprobs=[[]] + [[-1.0]] * (n - 1), weight_version=[-1] + [version] * (n - 1))
        trajectory = Trajectory(task_id=slot.task.id, attempt_id=slot.attempt_id, segments=[seg], n_turns=1)
        solved = self.solved(slot)
        return AttemptOutcome(slot.task.id, slot.attempt_id, trajectory, Score(reward=float(solved), solved=solved), 1)

    async def attempt(self, slot: Slot) -> AttemptOutcome:
        await asyncio.sleep(0)
        return self.outcome(slot)

    async def train_step(self, groups):
        await asyncio.sleep(0)
        self.step += 1
        self.weight_version += 1
        return {"step_sec": 0.0, "entropy/mean": 1.0}

    async def publish_weights(self):
        pass

    async def save_checkpoint(self, cursor):
        self.checkpoints.append(cursor)

    async def engine_busy_sec(self):
        return 0.0

    def engine_count(self):
        return 1

    def extra_metrics(self):
        return {}
