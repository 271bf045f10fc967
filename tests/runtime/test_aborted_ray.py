"""The Ray loop with an engine server that aborts requests (issue 25, item 7): aborted tries are retried by the
driver, never graded, and counted in ``rollout/aborted_tries``.

On this path each try is one call to a rollout worker (``max_retries=0`` there) and the driver retries: the
aborted tries' errors must survive the driver's merge, so the count does too. The server aborts the second
turn of each attempt's first try, after its tool call has run (SGLang's answer to a request in flight when
``/pause_generation`` mode 'abort' comes for a weight sync).
"""

from __future__ import annotations

import asyncio
import re

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs ray (pip install -e '.[dev]' installs it)")

from fireflash.protocols import Status, Trajectory
from fireflash.runtime.placement import Placement
from fireflash.runtime.ray_backend import RayRuntime
from fireflash.tracking import MetricsWriter
from fireflash.tasks import bundled_tasks

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]


class _AbortingServer:
    """FireFlash's SGLang-compatible server over a scripted engine that aborts each attempt's first try once."""

    def __init__(self, index: int) -> None:
        from conftest import attempt_script

        from fireflash.engines.scripted import ScriptedEngine
        from fireflash.engines.serve import EngineServer
        from fireflash.models import build_tiny_model, build_tiny_tokenizer

        tok = build_tiny_tokenizer()
        engine = ScriptedEngine(tok, attempt_script(lambda group, attempt: attempt == 0),
                                model=build_tiny_model(len(tok), seed=0), seed=0)
        generate, aborted = engine.generate, set()

        async def aborting(requests):  # every try of this path is '#1': abort the first turn 1 seen per attempt
            results = await generate(requests)
            for r in results:
                attempt, turn = re.fullmatch(r"(.*)#\d+-turn(\d+)", r.request_id).groups()
                if turn == "1" and attempt not in aborted:
                    aborted.add(attempt)
                    r.finish_reason = "abort"
            return results

        engine.generate = aborting
        self.server = EngineServer(engine)
        self.url = self.server.start()

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        self.server.close()


def _build_server(index: int) -> _AbortingServer:
    return _AbortingServer(index)


def _rollout_parts(index: int):
    from test_ray_servers import _rollout_parts as parts

    return parts(index)


def _trainer(rank: int, world_size: int):
    from test_ray_backend import _trainer as trainer

    return trainer(rank, world_size)


def test_ray_driver_retries_tries_an_engine_server_aborted_and_counts_them(local_ray, tmp_path):
    from fireflash.engines.sglang import SGLangEngine
    from fireflash.harness.config import HarnessConfig, SamplingConfig
    from fireflash.rl.config import ObjectiveConfig

    task = next(t for t in bundled_tasks("train") if t.id == "text-count-lines")
    placement = Placement(
        num_nodes=1, gpus_per_node=0, trainer_workers=1, gpus_per_trainer_worker=0, cpus_per_trainer_worker=0.5,
        engine_kind="sglang", engines=1, gpus_per_engine=0, engines_in_workers=False, rollout_workers=1,
        cpus_per_rollout_worker=0.5, attempts_per_worker=4, cpus_per_engine=0.5, weight_sync="disk",
    )
    harness = HarnessConfig(max_turns=3, context_window_tokens=4096, max_total_tokens=8192,
                            sampling=SamplingConfig(max_new_tokens_per_turn=64, n_top_logprobs=32))
    runtime = RayRuntime(
        tasks=[task], build_rollout=_rollout_parts, build_trainer=_trainer, placement=placement, harness=harness,
        objective=ObjectiveConfig(loss_floor_tokens=64), run_dir=tmp_path, steps=1, group_size=2,
        groups_per_step=1, max_inflight_attempts=2, max_attempt_retries=2, discard_zero_signal_groups=True, seed=0,
        max_worker_restarts=0, worker_start_timeout_sec=120, writer=MetricsWriter(tmp_path, tensorboard=False),
        build_server=_build_server, connect_server=SGLangEngine, weight_sync="disk", weight_sync_timeout_sec=60,
    )
    [metrics] = asyncio.run(runtime.run())

    # every attempt lost its first try to an abort and was graded once, on the retry (group 0's two at least)
    saved = [Trajectory.load(p) for p in (tmp_path / "trajectories").glob("g*/a*.json")]
    assert saved and all(t.status is Status.COMPLETED and t.attempt_id.endswith("#1") for t in saved)
    assert runtime.total.lost_attempts == 0 and runtime.total.groups_lost == 0
    assert metrics["rollout/aborted_tries"] >= 2 and runtime.total.aborted_tries == runtime.total.attempts
    assert runtime.total.retries == runtime.total.aborted_tries
