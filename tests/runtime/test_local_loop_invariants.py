"""The local loop's invariants end to end: fault accounting, ``--sync`` mode, staleness at the default bound.

Real sandboxes and graders, the scripted engine, the tiny model (as test_local_runtime.py); the wrappers
here only record or gate, they change no result.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from fireflash.grading import make_grader
from fireflash.protocols import GenerateRequest
from fireflash.runtime.faults import FlakyBackend, FlakyEngine
from fireflash.runtime.local import LocalRuntime
from fireflash.tracking import MetricsWriter, read_metrics
from fireflash.sandbox import make_backend
from fireflash.sandbox.config import SandboxConfig

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]


def _runtime(task, setup, tmp_path, engine, *, trainer=None, steps=3, group_size=4, inflight=4, retries=2,
             backend=None, grader=None, **kw):
    tok, make_trainer, _, harness = setup
    trainer = trainer or make_trainer()
    grader = grader or make_grader(task.grader)
    backend = backend or make_backend(SandboxConfig())
    runtime = LocalRuntime(
        tasks=[task], backend=backend, engine=engine, tokenizer=tok, trainer=trainer, grader_for=lambda t: grader,
        harness=harness, objective=trainer.objective, run_dir=tmp_path, steps=steps, group_size=group_size,
        groups_per_step=1, max_inflight_attempts=inflight, max_attempt_retries=retries,
        discard_zero_signal_groups=True, seed=0, writer=MetricsWriter(tmp_path, tensorboard=False), **kw,
    )
    return runtime, backend


async def _run(runtime, backend):
    try:
        return await runtime.run()
    finally:
        await backend.close()


class EngineProxy:
    """Delegates every ``Engine`` call to ``inner``; subclasses override ``generate``."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def weight_version(self):
        return self.inner.weight_version

    async def generate(self, requests: list[GenerateRequest]):
        return await self.inner.generate(requests)

    async def update_weights(self, weights, version):
        await self.inner.update_weights(weights, version)

    async def pause(self):
        await self.inner.pause()

    async def resume(self):
        await self.inner.resume()


def _record_steps(trainer, before=None):
    """Wrap ``trainer.train_step``: each call appends (start, end, version before, groups) to the returned list.

    ``before(step_index)`` runs first on the trainer thread (a gate)."""
    steps, train_step = [], trainer.train_step

    def recorded(groups, **kw):
        if before is not None:
            before(len(steps))
        start, version = time.perf_counter(), trainer.weight_version
        metrics = train_step(groups, **kw)
        steps.append((start, time.perf_counter(), version, groups))
        return metrics

    trainer.train_step = recorded
    return steps


def _sampled_versions(group):
    """The weight version of every policy-sampled token of ``group``."""
    return [v for t in group.trajectories for s in t.segments for v, m in zip(s.weight_version, s.loss_mask) if m]


# --- faults: retries that cannot suffice cost groups, counted, never the run ---------------------------------


def _quiesce_before_last_step(runtime, timeout_sec=60.0):
    """A ``_record_steps`` gate: the last step starts once no attempt runs and none can start.

    The bound is then full of queued groups that the finished trainer never takes, so every attempt ever
    started has been counted by the last step's metrics (attempts still running at the end are cancelled
    uncounted, which would make the fault counts below depend on timing)."""

    def gate(step_index):
        if step_index < runtime.steps - 1:
            return
        deadline = time.monotonic() + timeout_sec
        while not (runtime.running_attempts == runtime.scheduler.open_groups == 0
                   and len(runtime.queue) >= runtime.queue.max_queued):
            if time.monotonic() > deadline:
                raise TimeoutError("rollouts never went quiet before the last step")
            time.sleep(0.05)

    return gate


class RoutedEngine(EngineProxy):
    """Requests of the attempts in ``doomed`` go to ``doomed_engine``, the rest to ``inner``."""

    def __init__(self, inner, doomed_engine, doomed):
        super().__init__(inner)
        self.doomed_engine, self.doomed = doomed_engine, doomed

    async def generate(self, requests):
        if any(f"/{a}#" in r.request_id for r in requests for a in self.doomed):
            return await self.doomed_engine.generate(requests)
        return await self.inner.generate(requests)


def _groups_that_lost_an_attempt(run_dir, n_groups, group_size):
    """From the saved trajectories: a lost attempt saves no ``aNN.json`` (only, perhaps, ``aNN.failed.json``)."""
    saved = [len(list((run_dir / "trajectories" / f"g{g:05d}").glob("a[0-9][0-9].json"))) for g in range(n_groups)]
    return sum(n < group_size for n in saved)


def test_faults_beyond_the_retries_cost_groups_counted_never_the_run(task, setup, tmp_path):
    scripted = setup[2](lambda g, a: a % 2 == 0)
    # attempt g0/a1 fails every try (group 0 is certainly lost); every other call fails at random, once retried
    doomed = FlakyEngine(scripted, failure_rate=1.0, seed=0)
    flaky = FlakyEngine(scripted, failure_rate=0.05, seed=43)
    backend = FlakyBackend(make_backend(SandboxConfig()), fork_failure_rate=0.10, seed=32)
    runtime, backend = _runtime(task, setup, tmp_path, RoutedEngine(flaky, doomed, {"g0/a1"}), retries=1,
                                backend=backend, max_queued_groups=2)
    _record_steps(runtime.trainer, before=_quiesce_before_last_step(runtime))
    history = asyncio.run(_run(runtime, backend))

    assert runtime.trainer.step == 3 and [m["weight_version"] for m in history] == [1.0, 2.0, 3.0]
    logged = read_metrics(tmp_path)
    lost_groups = sum(r["groups/lost_to_infrastructure"] for r in logged)
    assert lost_groups == sum(m["groups/lost_to_infrastructure"] for m in history)
    assert lost_groups == _groups_that_lost_an_attempt(tmp_path, runtime.scheduler.next_group, 4) >= 1
    # every injected fault cost exactly one try: retried, or the last try of an attempt then lost
    retries = sum(r["rollout/retries"] for r in logged)
    lost_tries = sum(r["rollout/lost_attempts"] for r in logged)
    assert not (tmp_path / "trajectories" / "g00000" / "a01.json").exists() and lost_tries >= 1 and retries >= 1
    assert backend.injected + flaky.injected + doomed.injected == retries + lost_tries


# --- --sync: generate a batch, then train, then generate -------------------------------------------------


class TimedEngine(EngineProxy):
    """Records (start, end) of every ``generate`` call, perf_counter seconds."""

    def __init__(self, inner):
        super().__init__(inner)
        self.calls: list[tuple[float, float]] = []

    async def generate(self, requests):
        start = time.perf_counter()
        try:
            return await self.inner.generate(requests)
        finally:
            self.calls.append((start, time.perf_counter()))


def test_sync_mode_never_samples_while_training_and_trains_only_fresh_turns(task, setup, tmp_path):
    _, make_trainer, make_engine, _ = setup
    engine = TimedEngine(make_engine(lambda g, a: a < 2))
    trainer = make_trainer()
    steps = _record_steps(trainer)
    # more workers than a group has attempts: in async mode they would start the next group meanwhile
    runtime, backend = _runtime(task, setup, tmp_path, engine, trainer=trainer, steps=3, inflight=6, mode="sync")
    history = asyncio.run(_run(runtime, backend))

    assert [m["weight_version"] for m in history] == [1.0, 2.0, 3.0]
    assert [version for _, _, version, _ in steps] == [0, 1, 2]
    overlaps = [(call, (s, e)) for call in engine.calls for s, e, _, _ in steps if call[0] < e and s < call[1]]
    assert engine.calls and not overlaps, f"{len(overlaps)} engine calls overlapped a training step"
    for _, _, version, groups in steps:  # staleness 0: sampled by exactly the weights being trained
        assert {v for g in groups for v in _sampled_versions(g)} == {version}
    assert all(m.get("stale/dropped_share", 0.0) == 0.0 for m in history)


# --- staleness at the default max_staleness (6): a straggler's old turn is masked, its fresh one trained -------


class StragglerEngine(EngineProxy):
    """Holds the second turn of attempt g0/a0 until the engine's weights are ``release_version`` or newer."""

    def __init__(self, inner, release_version):
        super().__init__(inner)
        self.release_version = release_version
        self._updated = asyncio.Event()

    async def generate(self, requests):
        if any("/g0/a0#" in r.request_id and r.request_id.endswith("-turn1") for r in requests):
            while self.inner.weight_version < self.release_version:
                self._updated.clear()
                await self._updated.wait()
        return await self.inner.generate(requests)

    async def update_weights(self, weights, version):
        await self.inner.update_weights(weights, version)
        self._updated.set()


def test_a_turn_older_than_the_default_max_staleness_is_masked_and_the_fresh_turn_trained(task, setup, tmp_path):
    _, make_trainer, make_engine, _ = setup
    trainer = make_trainer()
    assert trainer.objective.max_staleness == 6  # the default, RECIPE.md §1
    steps = _record_steps(trainer)
    engine = StragglerEngine(make_engine(lambda g, a: a == 0), release_version=7)
    # group 0 stays open (sampling) for 7 versions and holds one unit of the queue bound all along; a bound of
    # 2 leaves one unit for the groups trained meanwhile, so group 0 is trained at step 8 or 9 (10: one to spare)
    runtime, backend = _runtime(task, setup, tmp_path, engine, trainer=trainer, steps=10, group_size=2, inflight=3,
                                max_queued_groups=2, checkpoint_every_steps=10)
    history = asyncio.run(_run(runtime, backend))
    assert [m["weight_version"] for m in history] == [float(v) for v in range(1, 11)]

    [(index, version, group)] = [(i, version, g) for i, (_, _, version, groups) in enumerate(steps) for g in groups
                                 if "/g0/" in g.trajectories[0].attempt_id]
    assert version >= 7
    straggler = next(t for t in group.trajectories if "/g0/a0#" in t.attempt_id)
    turns = [v for s in straggler.segments for v, m in zip(s.weight_version, s.loss_mask) if m]
    first, last = [v for v in turns if v == 0], [v for v in turns if v >= 7]
    assert first and last and len(first) + len(last) == len(turns)  # turn 0 at version 0, turn 1 at 7 or later
    # masked: every token more than 6 versions behind the trainer, the straggler's first turn among them (the
    # other attempt of group 0 ran at version 0 too); trained: its last turn, 0 to 2 versions behind
    versions = _sampled_versions(group)
    stale = [v for v in versions if version - v > 6]
    assert len(stale) == versions.count(0) >= len(first) and all(version - v <= 6 for v in last)
    m = history[index]
    assert m["stale/dropped_share"] == pytest.approx(len(stale) / len(versions))
    assert 0 < m["stale/dropped_share"] < 1 and m["tokens/n"] == len(versions)
    fresh = sum(m.get(f"tokens/staleness_{b}", 0.0) for b in ("0", "1", "2-3", "4-6"))
    assert fresh == pytest.approx(len(versions) - len(stale)) and fresh >= len(last)
    assert all(m.get("stale/dropped_share", 0.0) == 0.0 for i, m in enumerate(history) if i != index)
