"""The run loop draws each group's source by ``[tasks.mix]``'s weights, then its task within it (issue 30).

RLLoop with instant fake attempts: two ``agentic`` tasks and three ``swe`` tasks. Each group's task must
belong to the source the mix drew (both under the seeded shuffle and under online curation), every metrics
row names both sources, the cursor carries the counts, a resume continues the draw, and both backends hand
the weights to the shared loop.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from fake_loop import FakeLoopHooks

from fireflash.cli.train import _mix_caption
from fireflash.curation.config import CurationConfig
from fireflash.curation.mix import SourceMix
from fireflash.protocols import Task
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import AttemptOutcome
from fireflash.runtime.groups import GroupScheduler, Slot
from fireflash.runtime.local import LocalRuntime
from fireflash.runtime.loop import RLLoop
from fireflash.runtime.placement import Placement
from fireflash.runtime.ray_backend import RayRuntime
from fireflash.tracking import MetricsWriter, read_metrics

pytestmark = pytest.mark.unit
SOURCES = {"agentic": ["a1", "a2"], "swe": ["s1", "s2", "s3"]}
WEIGHTS = {"agentic": 0.52, "swe": 0.48}
TASKS = [Task(id=t, instruction=f"solve {t}", metadata={"source": s}) for s, ids in SOURCES.items() for t in ids]


class MixHooks(FakeLoopHooks):
    """Instant attempts (even attempt indices solve, so every group has signal) and instant steps; records the
    task of each group."""

    def __init__(self, step: int = 0) -> None:
        super().__init__(step)
        self.group_tasks: dict[int, str] = {}

    def outcome(self, slot: Slot) -> AttemptOutcome:
        self.group_tasks[slot.group_id] = slot.task.id
        return super().outcome(slot)

    async def save_checkpoint(self, cursor):
        self.checkpoints.append(json.loads(json.dumps(cursor)))  # as a checkpoint stores it


def _run(tmp_path, curation, steps=10, hooks=None, cursor=None):
    hooks = hooks or MixHooks()
    loop = RLLoop(
        hooks, tasks=TASKS, group_size=2, seed=0, objective=ObjectiveConfig(), run_dir=tmp_path, steps=steps,
        groups_per_step=2, max_inflight_attempts=4, discard_zero_signal_groups=True,
        writer=MetricsWriter(tmp_path, tensorboard=False), save_trajectories=False, curation=curation, mix=WEIGHTS,
    )
    loop.load_cursor(cursor)
    asyncio.run(loop.run())
    return loop, hooks


@pytest.mark.parametrize("curation", [None, CurationConfig(sampler="uniform"), CurationConfig()],
                         ids=["shuffle", "uniform", "online"])
def test_each_group_comes_from_the_source_the_weights_drew(tmp_path, curation):
    loop, hooks = _run(tmp_path, curation)
    expected = SourceMix(SOURCES, WEIGHTS, seed=0)  # the same draw, replayed
    sources = [loop.mix.source_of(hooks.group_tasks[g]) for g in sorted(hooks.group_tasks)]
    assert sources == [expected.draw(g) for g in sorted(hooks.group_tasks)]
    assert set(hooks.group_tasks.values()) == {t.id for t in TASKS}  # every task of both sources drawn
    rows = read_metrics(tmp_path)
    assert len(rows) == 10
    for row in rows:  # each step's batch by source, next to the target, and the run's shares
        assert row["mix/agentic/weight"] == 0.52 and row["mix/swe/weight"] == 0.48
        assert row["mix/agentic/trained"] + row["mix/swe/trained"] == 2
        assert {"mix/agentic/drawn", "mix/swe/drawn", "mix/agentic/trained_share", "mix/swe/drawn_share"} <= set(row)
    n = sum(loop.mix.drawn.values())
    assert abs(loop.mix.drawn["swe"] - 0.48 * n) < 1
    assert sum(r["mix/swe/trained"] for r in rows) == loop.mix.trained["swe"]
    assert hooks.checkpoints[-1]["mix"]["trained"] == loop.mix.trained  # the last checkpoint follows the last step


def test_a_resumed_scheduler_continues_the_same_groups_and_draws():
    def scheduler(cursor=None, mix_state=None):
        mix = SourceMix(SOURCES, WEIGHTS, seed=5)
        if mix_state:
            mix.load_state_dict(mix_state)
        return GroupScheduler(TASKS, group_size=2, seed=5, cursor=cursor, mix=mix)

    def issue(sched, groups):
        tasks = {}
        while sched.next_group < groups or not sched.opens_group():
            slot = sched.next_slot()
            tasks.setdefault(slot.group_id, slot.task.id)
        return tasks

    straight = issue(scheduler(), 40)
    first = scheduler()
    head = issue(first, 17)
    with pytest.raises(ValueError, match="needs the queued groups' task ids"):
        first.cursor([3])  # ids alone cannot say which source's order a queued group came from
    state = json.loads(json.dumps({"cursor": first.cursor({}), "mix": first.mix.state_dict()}))
    resumed = scheduler(state["cursor"], state["mix"])
    rest = issue(resumed, 40)
    assert head | rest == straight  # re-issued groups keep their task, new ones continue each source's order
    assert resumed.mix.drawn == {s: sum(t in SOURCES[s] for t in straight.values()) for s in SOURCES}


def test_the_loop_resumes_the_mix_counts_from_the_checkpoint(tmp_path):
    first, hooks = _run(tmp_path / "a", None, steps=4)
    cursor = hooks.checkpoints[-1]
    resumed, _ = _run(tmp_path / "b", None, steps=6, hooks=MixHooks(step=4), cursor=cursor)
    assert sum(resumed.mix.trained.values()) == 12  # 4 steps before the resume, 2 after, 2 groups each
    assert sum(resumed.mix.drawn.values()) >= cursor["next_group"] + 4


def test_both_backends_hand_the_mix_to_the_shared_loop(tmp_path):
    common = {"objective": ObjectiveConfig(), "run_dir": tmp_path, "steps": 1, "group_size": 2, "groups_per_step": 1,
              "max_inflight_attempts": 2, "max_attempt_retries": 0, "discard_zero_signal_groups": True, "seed": 0,
              "mix": WEIGHTS}
    local = LocalRuntime(tasks=TASKS, backend=None, engine=None, tokenizer=None, trainer=MixHooks(),
                         grader_for=lambda t: None, harness=None, **common)
    placement = Placement(
        num_nodes=1, gpus_per_node=0, trainer_workers=1, gpus_per_trainer_worker=0, cpus_per_trainer_worker=1,
        engine_kind="scripted", engines=1, gpus_per_engine=0, engines_in_workers=True, rollout_workers=1,
        cpus_per_rollout_worker=1, attempts_per_worker=2,
    )
    ray = RayRuntime(tasks=TASKS, build_rollout=None, build_trainer=None, placement=placement, harness=None, **common)
    ray.loop.load_cursor(None)  # RayRuntime does this in _start, once a resume's cursor is known
    for runtime in (local, ray):
        assert runtime.loop.mix is not None and runtime.loop.mix.weights == WEIGHTS
        assert runtime.loop.scheduler.mix is runtime.loop.mix
    assert _mix_caption(local) == " · mix: agentic 0 drawn (target 52%), swe 0 drawn (target 48%)"  # the live view
