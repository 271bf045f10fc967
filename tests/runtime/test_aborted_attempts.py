"""Tries the engine aborts (a weight-sync abort, a shutdown) are retried, never graded, and counted apart.

An ABORTED trajectory was stopped from outside, not ended by the model: grading it would train the policy
against a 0 reward it did not earn (issue 25, item 7). It costs a try like an infrastructure failure; an
attempt whose every try is aborted is lost (its group too), and ``rollout/aborted_tries`` counts them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from fireflash.engines.scripted import ScriptedEngine
from fireflash.evaluation.runner import failure_reason
from fireflash.rollout.trials import run_trials
from fireflash.grading import make_grader
from fireflash.protocols import GenerateRequest, GenerateResult, Status
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import ParentPool, scored_attempt
from fireflash.runtime.groups import GroupQueue, GroupScheduler
from fireflash.runtime.loop import RolloutStats, settle_attempt
from fireflash.sandbox import make_backend
from fireflash.sandbox.config import SandboxConfig

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]
# this folder's conftest by path: as a plain module name, "conftest" can resolve to another test folder's
_spec = importlib.util.spec_from_file_location("runtime_aborted_conftest", Path(__file__).with_name("conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
DONE, RIGHT = _conftest.DONE, _conftest.RIGHT


class AbortingEngine:
    """A ``ScriptedEngine`` whose requests matching ``aborts`` come back as SGLang returns a request aborted by
    a weight sync: finish_reason 'abort' and the tokens sampled so far."""

    def __init__(self, engine: ScriptedEngine, aborts: Callable[[str], bool]) -> None:
        self.engine, self.aborts = engine, aborts

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        results = await self.engine.generate(requests)
        for r in results:
            if self.aborts(r.request_id):
                r.finish_reason = "abort"
                del r.token_ids[2:], r.logprobs[2:], r.topk_ids[2:], r.topk_logprobs[2:]
        return results


class CountingGrader:
    """The task's grader, recording which attempts it graded."""

    def __init__(self, grader) -> None:
        self.grader, self.graded = grader, []

    async def grade(self, task, sandbox):
        self.graded.append(task.id)
        return await self.grader.grade(task, sandbox)


def solving_script(request: GenerateRequest) -> str:
    """turn 0: the right command; turn 1: stop (every attempt solves when it is not aborted)."""
    return DONE if int(re.search(r"-turn(\d+)$", request.request_id)[1]) >= 1 else RIGHT


def run_group(task, setup, tmp_path, aborts, group_size=1, max_retries=1):
    """One group of ``group_size`` attempts, each scored and settled; returns (outcomes, stats, queue, grader)."""
    tok, _, _, harness = setup
    scheduler = GroupScheduler([task], group_size=group_size, seed=0)
    stats, queue = RolloutStats(), GroupQueue(1, 1)
    engine = AbortingEngine(ScriptedEngine(tok, solving_script), aborts)
    grader = CountingGrader(make_grader(task.grader))

    async def main():
        backend = make_backend(SandboxConfig())
        pool = ParentPool(backend)
        outcomes = []
        try:
            for _ in range(group_size):
                slot = scheduler.next_slot()
                outcome = await scored_attempt(task, lambda: pool.get(task), engine, tok, harness, grader,
                                               slot.attempt_id, max_retries=max_retries)
                await settle_attempt(slot, outcome, scheduler, queue, ObjectiveConfig(), False, [stats], tmp_path)
                outcomes.append(outcome)
            return outcomes
        finally:
            await pool.close(task)
            await backend.close()

    return asyncio.run(main()), stats, queue, grader


def test_a_try_aborted_by_the_engine_is_retried_and_only_the_retry_is_graded(task, setup, tmp_path):
    # the first try is aborted on its second turn, after its tool call ran: it would grade as solved or not
    [outcome], stats, _, grader = run_group(task, setup, tmp_path, lambda rid: rid.endswith("#1-turn1"))
    assert not outcome.lost and outcome.tries == 2 and outcome.aborted_tries == 1
    assert outcome.trajectory.status is Status.COMPLETED and outcome.trajectory.attempt_id.endswith("#2")
    assert outcome.score.solved and len(grader.graded) == 1
    [aborted] = outcome.failed_trajectories  # kept for inspection, never trained on
    assert aborted.status is Status.ABORTED and aborted.attempt_id.endswith("#1")
    metrics = stats.take()
    assert metrics["rollout/aborted_tries"] == 1 and metrics["rollout/retries"] == 1
    assert metrics["rollout/lost_attempts"] == 0 and metrics["rollout/reward_mean"] == 1.0


def test_an_attempt_aborted_on_every_try_is_lost_with_its_group_never_a_zero_reward(task, setup, tmp_path):
    # attempt a0 is aborted on every try; a1 runs normally: the group must not train a0 as a failure
    outcomes, stats, queue, grader = run_group(task, setup, tmp_path, lambda rid: "/a0#" in rid, group_size=2)
    assert outcomes[0].lost and outcomes[0].tries == 2 and outcomes[0].aborted_tries == 2
    assert [e.type for e in outcomes[0].errors] == ["AttemptAborted", "AttemptAborted"]
    assert not outcomes[1].lost and outcomes[1].aborted_tries == 0
    assert len(grader.graded) == 1  # only a1
    assert len(queue) == 0  # lost to infrastructure, not queued for the trainer
    metrics = stats.take()
    assert metrics["rollout/aborted_tries"] == 2 and metrics["rollout/lost_attempts"] == 1
    assert metrics["groups/lost_to_infrastructure"] == 1 and metrics["groups/done"] == 1
    assert metrics["rollout/reward_mean"] == 1.0  # a1's reward only: no 0 for the aborted attempt
    saved = sorted(p.name for p in (tmp_path / "g00000").iterdir())
    assert saved == ["a00.failed.json", "a01.json"]


def test_evaluation_and_probing_do_not_score_an_aborted_trial_as_unsolved(task, setup):
    """``run_trials`` (eval and probe): an aborted try is retried; a trial aborted on every try is lost."""
    tok, _, _, harness = setup
    # trial 0: aborted on every try; trial 1: its first try aborted, then solved
    engine = AbortingEngine(ScriptedEngine(tok, solving_script), lambda rid: "/t0#" in rid or "/t1#1-" in rid)

    async def main():
        backend = make_backend(SandboxConfig())
        try:
            return await run_trials([task], 2, backend=backend, engine=engine, tokenizer=tok, harness=harness,
                                    grader_for=lambda t: make_grader(t.grader), max_concurrent=1, max_retries=1,
                                    attempt_prefix="eval")
        finally:
            await backend.close()

    lost, solved = asyncio.run(main())[task.id]
    assert lost.lost and failure_reason(lost) == "infrastructure:AttemptAborted"
    assert not solved.lost and solved.score.solved and solved.tries == 2 and solved.aborted_tries == 1
