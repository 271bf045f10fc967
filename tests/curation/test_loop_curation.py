"""The run loop draws through online curation (issue 29): RLLoop with instant fake attempts, both backends' wiring.

Three tasks: ``easy`` is always solved, ``hard`` never, ``mid`` by every other attempt. Uniform order spends two
thirds of its groups on the zero-signal two; the online sampler retires them and draws ``mid``. The checkpoint
cursor carries the curation state, and a loop resumed from it continues it.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from fake_loop import FakeLoopHooks

from fireflash.curation.config import CurationConfig
from fireflash.protocols import Task
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import AttemptOutcome
from fireflash.runtime.groups import Slot
from fireflash.runtime.local import LocalRuntime
from fireflash.runtime.loop import RLLoop
from fireflash.runtime.placement import Placement
from fireflash.runtime.ray_backend import RayRuntime
from fireflash.tracking import MetricsWriter, read_metrics

pytestmark = pytest.mark.unit
TASKS = [Task(id=i, instruction=f"solve {i}") for i in ("easy", "hard", "mid")]


class TaskHooks(FakeLoopHooks):
    """Instant attempts solved by task (easy: all, hard: none, mid: even attempt indices); instant steps."""

    def __init__(self, step: int = 0) -> None:
        super().__init__(step)
        self.drawn: Counter[str] = Counter()

    def outcome(self, slot: Slot) -> AttemptOutcome:
        if slot.index == 0:
            self.drawn[slot.task.id] += 1
        return super().outcome(slot)

    def solved(self, slot: Slot) -> bool:
        return {"easy": True, "hard": False, "mid": slot.index % 2 == 0}[slot.task.id]


def _run(tmp_path, curation, steps, hooks=None, cursor=None, probe_seed=()):
    hooks = hooks or TaskHooks()
    loop = RLLoop(
        hooks, tasks=TASKS, group_size=4, seed=0, objective=ObjectiveConfig(), run_dir=tmp_path, steps=steps,
        groups_per_step=1, max_inflight_attempts=4, discard_zero_signal_groups=True,
        writer=MetricsWriter(tmp_path, tensorboard=False), save_trajectories=False, curation=curation,
        probe_seed=probe_seed,
    )
    loop.load_cursor(cursor)
    asyncio.run(loop.run())
    return loop, hooks


def test_online_curation_draws_the_task_with_signal_and_logs_it(tmp_path):
    uniform, _ = _run(tmp_path / "u", CurationConfig(sampler="uniform"), steps=12)
    online, o_hooks = _run(tmp_path / "o", CurationConfig(retire_after_groups=1, readmit_every_groups=0), steps=12)
    u_total, o_total = uniform.sampler.total, online.sampler.total
    # uniform: every task once per epoch, 2 of 3 groups carry nothing
    assert u_total["zero_signal"] / u_total["groups"] > 0.6
    assert o_total["zero_signal"] / o_total["groups"] < 0.35, o_hooks.drawn
    assert set(online.sampler.retired) == {"easy", "hard"} and uniform.sampler.retired == []
    rows = read_metrics(tmp_path / "o")
    assert len(rows) == 12
    assert {"curation/zero_signal_share_total", "curation/predicted_zero_signal_share_total",
            "curation/retired_tasks", "curation/pool_pass_rate_p50"} <= set(rows[-1])
    assert rows[-1]["curation/retired_tasks"] == 2.0


def test_probe_seed_steers_the_first_draws(tmp_path):
    seed = [("easy", 12, 12, 1.0), ("hard", 0, 12, 0.0), ("mid", 6, 12, 0.5)]
    _, hooks = _run(tmp_path, CurationConfig(readmit_every_groups=0), steps=3, probe_seed=seed)
    # several groups sample at once; the divisor for mid's open groups lets a few go elsewhere
    assert hooks.drawn["mid"] >= 3 * (hooks.drawn["easy"] + hooks.drawn["hard"]), hooks.drawn


def test_the_checkpoint_cursor_carries_the_curation_state_and_resume_continues_it(tmp_path):
    cfg = CurationConfig(retire_after_groups=2, readmit_every_groups=0)
    first, hooks = _run(tmp_path, cfg, steps=6)
    cursor = hooks.checkpoints[-1]
    assert set(cursor["curation"]["tasks"]) == {"easy", "hard", "mid"}
    # slot loops run until cancelled: groups settled after the last checkpoint rerun on resume
    assert 0 < cursor["curation"]["total"]["groups"] <= first.sampler.total["groups"]
    resumed_hooks = TaskHooks(step=6)
    resumed = RLLoop(
        resumed_hooks, tasks=TASKS, group_size=4, seed=0, objective=ObjectiveConfig(), run_dir=tmp_path, steps=8,
        groups_per_step=1, max_inflight_attempts=4, discard_zero_signal_groups=True, save_trajectories=False,
        curation=cfg, probe_seed=[("mid", 0, 100, 0.0)],  # ignored on resume: the saved state holds the seed
    )
    resumed.load_cursor(cursor)
    assert resumed.sampler.rates.state_dict() == cursor["curation"]["tasks"]
    assert set(resumed.sampler.retired) == set(first.sampler.retired)
    asyncio.run(resumed.run())
    assert resumed.sampler.total["groups"] > cursor["curation"]["total"]["groups"]
    assert resumed_hooks.drawn["easy"] == resumed_hooks.drawn["hard"] == 0  # still retired after the resume


def test_both_backends_hand_the_curation_config_to_the_shared_loop(tmp_path):
    cfg = CurationConfig(sampler="uniform")
    common = {"objective": ObjectiveConfig(), "run_dir": tmp_path, "steps": 1, "group_size": 2, "groups_per_step": 1,
              "max_inflight_attempts": 2, "max_attempt_retries": 0, "discard_zero_signal_groups": True, "seed": 0,
              "curation": cfg, "probe_seed": [("mid", 1, 2, 0.5)]}
    local = LocalRuntime(tasks=TASKS, backend=None, engine=None, tokenizer=None, trainer=TaskHooks(),
                         grader_for=lambda t: None, harness=None, **common)
    placement = Placement(
        num_nodes=1, gpus_per_node=0, trainer_workers=1, gpus_per_trainer_worker=0, cpus_per_trainer_worker=1,
        engine_kind="scripted", engines=1, gpus_per_engine=0, engines_in_workers=True, rollout_workers=1,
        cpus_per_rollout_worker=1, attempts_per_worker=2,
    )
    ray = RayRuntime(tasks=TASKS, build_rollout=None, build_trainer=None, placement=placement, harness=None, **common)
    ray.loop.load_cursor(None)  # RayRuntime does this in _start, once a resume's cursor is known
    for runtime in (local, ray):
        assert runtime.loop.curation is cfg and runtime.loop.sampler is not None
        assert runtime.loop.sampler.rates.tasks["mid"].counts == {"solved": 1.0, "0.0000": 1.0}
