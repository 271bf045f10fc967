"""Tries the harness ends FAILED keep their trajectories; a lost attempt saves its last one as aNN.failed.json."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from fireflash.engines.scripted import ScriptedEngine
from fireflash.engines.sglang import SGLangEngine
from fireflash.grading import make_grader
from fireflash.protocols import Status, Trajectory
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import ParentPool, scored_attempt
from fireflash.runtime.groups import GroupQueue, GroupScheduler
from fireflash.runtime.loop import RolloutStats, settle_attempt
from fireflash.sandbox import make_backend
from fireflash.sandbox.config import SandboxConfig

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]


def settle(task, setup, tmp_path, script):
    """One attempt (two tries at most) with ``script``, settled into ``tmp_path``; returns (outcome, stats)."""
    tok, _, _, harness = setup
    scheduler = GroupScheduler([task], group_size=1, seed=0)
    slot, stats = scheduler.next_slot(), RolloutStats()

    async def main():
        backend = make_backend(SandboxConfig())
        pool = ParentPool(backend)
        try:
            outcome = await scored_attempt(task, lambda: pool.get(task), ScriptedEngine(tok, script), tok, harness,
                                           make_grader(task.grader), slot.attempt_id, max_retries=1)
            await settle_attempt(slot, outcome, scheduler, GroupQueue(1, 1), ObjectiveConfig(), True, [stats], tmp_path)
            return outcome
        finally:
            await pool.close(task)
            await backend.close()

    return asyncio.run(main()), stats


def test_lost_attempt_saves_its_last_failed_try(task, setup, tmp_path):
    outcome, stats = settle(task, setup, tmp_path, [])  # every try: the script is exhausted at once
    assert outcome.lost and outcome.tries == 2 and stats.lost_attempts == 1
    assert [t.status for t in outcome.failed_trajectories] == [Status.FAILED, Status.FAILED]
    assert [t.attempt_id[-2:] for t in outcome.failed_trajectories] == ["#1", "#2"]
    [saved] = (tmp_path / "g00000").iterdir()
    assert saved.name == "a00.failed.json"
    traj = Trajectory.load(saved)
    assert traj.attempt_id.endswith("#2") and traj.error.type == "ScriptExhausted" and traj.segments


def test_attempt_that_recovers_keeps_its_failed_try_but_saves_only_the_graded_one(task, setup, tmp_path):
    outcome, _ = settle(task, setup, tmp_path, lambda request: None if "#1-" in request.request_id else "Done.")
    assert not outcome.lost and outcome.tries == 2 and outcome.trajectory.status == Status.COMPLETED
    [failed] = outcome.failed_trajectories
    assert failed.status == Status.FAILED and failed.attempt_id.endswith("#1")
    assert sorted(p.name for p in (tmp_path / "g00000").iterdir()) == ["a00.json"]


def test_result_without_a_weight_version_costs_a_try_not_the_run(task, setup):
    """An SGLang server that does not say which weight version sampled a turn: every try fails with
    WeightVersionMissing and the attempt is lost, as with any engine error (never tagged with a guessed version)."""
    tok, _, _, harness = setup
    ids = tok.encode("Done.", add_special_tokens=False)

    def handler(request: httpx.Request) -> httpx.Response:
        meta = {"finish_reason": {"type": "length"}, "output_token_logprobs": [[-0.5, t, None] for t in ids],
                "output_top_logprobs": [[] for _ in ids]}  # no weight_version
        return httpx.Response(200, json={"output_ids": ids, "meta_info": meta})

    engine = SGLangEngine("http://sglang.test:30000", transport=httpx.MockTransport(handler))
    slot = GroupScheduler([task], group_size=1, seed=0).next_slot()

    async def main():
        backend = make_backend(SandboxConfig())
        pool = ParentPool(backend)
        try:
            return await scored_attempt(task, lambda: pool.get(task), engine, tok, harness, make_grader(task.grader),
                                        slot.attempt_id, max_retries=1)
        finally:
            await pool.close(task)
            await backend.close()

    outcome = asyncio.run(main())
    assert outcome.lost and outcome.tries == 2 and outcome.trajectory is None
    assert [e.type for e in outcome.errors] == ["AttemptFailed", "AttemptFailed"]
    assert all("WeightVersionMissing" in e.message and "meta_info.weight_version" in e.message for e in outcome.errors)
