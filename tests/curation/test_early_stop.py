"""Early stop of a doomed group (issue 29 deliverable 3): the rule's arithmetic by hand, the sampler's decision and
counts, and the scheduler closing the group (no more slots, not re-issued on resume, late outcomes dropped)."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from fake_loop import FakeLoopHooks

from fireflash.curation.config import CurationConfig
from fireflash.curation.online import polya_zero_signal, signal_probability_after
from fireflash.curation.sampler import TaskSampler
from fireflash.protocols import Score, Task, Trajectory
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import AttemptOutcome
from fireflash.runtime.groups import GroupScheduler
from fireflash.runtime.loop import RLLoop
from fireflash.tracking import MetricsWriter, read_metrics

pytestmark = pytest.mark.unit
S, F = (True, 1.0), (False, 0.0)


def test_signal_probability_after_finished_attempts_by_hand():
    alphas = {"solved": 2.0, "0.0000": 1.0}  # A = 3
    # two solved of G = 4: the last two must be solved too, the urn holding 2 + 2 of 3 + 2, then 5 of 6
    assert signal_probability_after(alphas, [S, S], 4) == pytest.approx(1 - (4 / 5) * (5 / 6))
    # three solved: the fourth alone can break the tie
    assert signal_probability_after(alphas, [S, S, S], 4) == pytest.approx(1 - 5 / 6)
    # one unsolved at reward 0: α = 1 + 1 of 4, then 5, then 6
    assert signal_probability_after(alphas, [F], 4) == pytest.approx(1 - (2 / 4) * (3 / 5) * (4 / 6))
    # a partial reward the task never showed: only this group's own attempts speak for it
    assert signal_probability_after(alphas, [(False, 0.4)] * 2, 4) == pytest.approx(1 - (2 / 5) * (3 / 6))


def test_two_outcomes_decide_signal_and_nothing_finished_is_the_prior_predictive():
    alphas = {"solved": 50.0, "0.0000": 0.5}
    assert signal_probability_after(alphas, [S, F], 4) == 1.0
    assert signal_probability_after(alphas, [(False, 0.2), (False, 0.4)], 4) == 1.0
    assert signal_probability_after(alphas, [], 4) == pytest.approx(1 - polya_zero_signal(alphas.values(), 4))
    assert signal_probability_after(alphas, [S] * 4, 4) == 0.0  # decided: all alike


def test_the_rule_is_calibrated_when_finishing_order_says_nothing_of_the_outcome():
    """Among groups whose P(signal) after 2 alike attempts is p, a share p ends with signal (Pólya urn)."""
    alphas = {"solved": 3.0, "0.0000": 1.0}
    rng, n, signal = random.Random(0), 20000, 0
    p = signal_probability_after(alphas, [S, S], 4)
    hits = 0
    for _ in range(n):
        q = rng.betavariate(3.0, 1.0)  # a task drawn from the posterior; its group's first two came out solved
        if rng.random() < q and rng.random() < q:
            hits += 1
            signal += not (rng.random() < q and rng.random() < q)
    assert signal / hits == pytest.approx(p, abs=0.02)


def _sampler(**cfg) -> TaskSampler:
    s = TaskSampler(["easy", "mid"], CurationConfig(**cfg), group_size=4, seed=0)
    s.seed_probe([("easy", 20, 20, 1.0), ("mid", 10, 20, 0.5)])
    return s


def test_doomed_needs_the_switch_enough_finished_attempts_of_one_outcome_and_a_low_probability():
    on = {"early_stop": True, "early_stop_signal_probability": 0.1, "early_stop_min_finished_attempts": 2}
    assert not _sampler().doomed("easy", [S, S, S])  # off by default
    s = _sampler(**on)
    assert not s.doomed("easy", [S])  # one finished: this group has not spoken yet
    assert s.doomed("easy", [S, S])  # 21 of 22 solved so far, P(signal) = 1 - 22.5/23 · 23.5/24 ≈ 0.04
    assert not s.doomed("easy", [S, F])  # signal already: never cancelled
    assert not s.doomed("mid", [S, S, S])  # P(signal) = 1 - 13.5/24 ≈ 0.44
    assert not s.doomed("easy", [S] * 4)  # complete: nothing to cancel


def test_a_cancelled_group_counts_as_zero_signal_and_its_unfinished_attempts_survive_resume():
    s = _sampler(early_stop=True)
    s.predicted[0] = 0.9
    s.settle(0, "easy", [S, S], unfinished=2)
    assert s.total["groups"] == s.total["zero_signal"] == s.total["cancelled"] == 1
    assert s.total["cancelled_attempts"] == 2
    assert s.rates.tasks["easy"].streak == 1 and s.rates.tasks["easy"].streak_kind == "all_solved"
    m = s.metrics()
    assert m["curation/cancelled_groups"] == 1.0 and m["curation/cancelled_attempts_total"] == 2.0
    resumed = _sampler(early_stop=True)
    resumed.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert resumed.total == s.total


def _outcome(slot, solved: bool) -> AttemptOutcome:
    trajectory = Trajectory(task_id=slot.task.id, attempt_id=slot.attempt_id)
    return AttemptOutcome(slot.task.id, slot.attempt_id, trajectory, Score(reward=float(solved), solved=solved), 1)


def test_the_scheduler_closes_a_doomed_group_and_a_checkpoint_does_not_reissue_it():
    sampler = _sampler(early_stop=True, sampler="uniform")  # draws the scheduler's pool of one
    sched = GroupScheduler([Task(id="easy", instruction="easy")], group_size=4, seed=0, sampler=sampler)
    slots = [sched.next_slot() for _ in range(3)]  # the fourth attempt not issued yet
    gid = slots[0].group_id
    assert sched.record(slots[0], _outcome(slots[0], True)) is None
    assert sched.cancel_if_doomed(gid) is None  # one finished: too early
    sched.record(slots[1], _outcome(slots[1], True))
    assert sched.cancel_if_doomed(gid) == 2  # two solved of a task solved 20 of 20: one running, one never issued
    assert sched.open_groups == 0 and str(gid) not in sched.cursor()["unfinished"]
    assert sched.record(slots[2], _outcome(slots[2], False)) is None  # it finished as it was cancelled: dropped
    assert sampler.total["cancelled"] == 1 and sampler.total["cancelled_attempts"] == 2
    assert sampler.rates.tasks["easy"].counts["solved"] == 22  # the two finished attempts count, the late one not
    assert sched.next_slot().group_id == gid + 1


def test_a_group_with_a_lost_attempt_is_left_to_finish_group():
    tasks = [Task(id="easy", instruction="easy")]
    sampler = TaskSampler(["easy"], CurationConfig(early_stop=True), group_size=4, seed=0)
    sampler.seed_probe([("easy", 20, 20, 1.0)])
    sched = GroupScheduler(tasks, group_size=4, seed=0, sampler=sampler)
    slots = [sched.next_slot() for _ in range(4)]
    sched.record(slots[0], AttemptOutcome("easy", slots[0].attempt_id, None, None, 2))  # lost
    sched.record(slots[1], _outcome(slots[1], True))
    sched.record(slots[2], _outcome(slots[2], True))
    assert sched.cancel_if_doomed(slots[0].group_id) is None


class DoomedHooks(FakeLoopHooks):
    """``easy``: attempts 0 and 1 solve at once, 2 and 3 run until cancelled (recorded); ``mid``: instant, even
    attempts solve, so its groups train. Instant steps; checkpoints recorded."""

    def __init__(self, step: int = 0) -> None:
        super().__init__(step)
        self.cancelled: list[str] = []

    async def attempt(self, slot):
        if slot.task.id == "easy" and slot.index >= 2:
            try:
                await asyncio.Event().wait()  # a long attempt: only a cancellation ends it
            except asyncio.CancelledError:
                self.cancelled.append(slot.attempt_id)
                raise
        return await super().attempt(slot)

    def solved(self, slot) -> bool:
        return slot.task.id == "easy" or slot.index % 2 == 0


def _loop(hooks, tmp_path, steps, cursor=None):
    loop = RLLoop(
        hooks, tasks=[Task(id=i, instruction=i) for i in ("easy", "mid")], group_size=4, seed=0,
        objective=ObjectiveConfig(), run_dir=tmp_path, steps=steps, groups_per_step=1, max_inflight_attempts=4,
        discard_zero_signal_groups=True, save_trajectories=False, writer=MetricsWriter(tmp_path, tensorboard=False),
        curation=CurationConfig(sampler="uniform", early_stop=True), probe_seed=[("easy", 20, 20, 1.0)],
    )
    loop.load_cursor(cursor)
    return loop


def test_the_loop_cancels_the_running_attempts_of_a_doomed_group_and_resume_keeps_the_counts(tmp_path):
    """Without the early stop the run hangs on easy's long attempts (the timeout fails it); with it, each easy
    group's two running attempts are cancelled through the backends' path (the attempt task), the run trains on
    mid, and the counts survive a checkpoint and resume."""
    hooks = DoomedHooks()
    loop = _loop(hooks, tmp_path, steps=3)

    async def run():
        async with asyncio.timeout(20):
            await loop.run()

    asyncio.run(run())
    easy_groups = loop.sampler.total["cancelled"]
    assert easy_groups >= 1 and len(hooks.cancelled) >= 2 * easy_groups - 2  # the last may be cut by the run's end
    assert all(a.split("/")[0] == "easy" and a.endswith(("a2", "a3")) for a in hooks.cancelled)
    assert loop.total.groups_cancelled == easy_groups and loop.total.cancelled_attempts == 2 * easy_groups
    assert loop._attempts == {} or all(g for g in loop._attempts.values())  # no group left with an empty entry
    rows = read_metrics(tmp_path)
    assert sum(r["groups/cancelled"] for r in rows) >= 1 and rows[-1]["curation/cancelled_groups_total"] >= 1
    cursor = hooks.checkpoints[-1]
    saved = cursor["curation"]["total"]["cancelled"]
    assert saved >= 1
    resumed = _loop(DoomedHooks(step=3), tmp_path, steps=4, cursor=cursor)
    assert resumed.sampler.total["cancelled"] == saved  # the counts are in the run's state, not only in rows
    asyncio.run(resumed.run())
    assert resumed.sampler.total["cancelled"] > saved
