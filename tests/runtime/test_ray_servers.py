"""The Ray loop with rollout engines as servers (issue 11): real HTTP, a real weight-update group, real sandboxes.

Two engine servers (FireFlash's SGLang-compatible server over a scripted engine with the tiny model, each in
its own Ray actor), 2 trainer workers (FSDP2 ranks over gloo) and 1 rollout worker that samples through the
SGLang client. After every step trainer rank 0 broadcasts its weights once through a gloo weight-update group
while both servers receive them. One server is killed mid-run: its in-flight attempts cost one try each (retried
on the other server, no group lost), Ray restarts it, the driver forms a new group with it and sends it the
newest weights before it gets attempts again. With a single server the attempts wait for it to come back. Every server records a checksum of the weights it installs, so
the test checks that the servers hold exactly the trainer's final weights, not just the version tag.

The same run with vLLM servers (issue 31): FireFlash's vLLM-faithful stand-in in each actor, trainer rank 0 in vLLM's
weight-transfer group (its gloo stand-in), each update paused with mode 'wait', and every result labeled with the
version the server reported before it was sampled.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs ray (pip install -e '.[dev]' installs it)")

from fireflash.protocols import Trajectory  # noqa: E402
from fireflash.runtime.placement import Placement  # noqa: E402
from fireflash.runtime.ray_actors import RolloutParts  # noqa: E402
from fireflash.runtime.ray_backend import RayRuntime  # noqa: E402
from fireflash.tracking import MetricsWriter, read_metrics  # noqa: E402
from fireflash.tasks import bundled_tasks  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]



def _solves(group: int, attempt: int) -> bool:
    return attempt == 0


def _checksum(model) -> float:
    return float(sum(t.double().sum() for t in model.state_dict().values()))


class _InActorServer:
    """FireFlash's SGLang-compatible (or vLLM-faithful) server over a scripted engine, inside the engine-server actor."""

    def __init__(self, index: int, log: str, kind: str = "sglang") -> None:
        from conftest import attempt_script

        from fireflash.engines.scripted import ScriptedEngine
        from fireflash.engines.serve import EngineServer
        from fireflash.models import build_tiny_model, build_tiny_tokenizer

        tok = build_tiny_tokenizer()
        engine = ScriptedEngine(tok, attempt_script(_solves), model=build_tiny_model(len(tok), seed=0), seed=0)
        update = engine.update_weights

        async def recorded(weights, version):  # every installed update: version + checksum of the model
            await update(weights, version)
            with open(log, "a") as f:
                f.write(json.dumps({"index": index, "pid": os.getpid(), "version": version,
                                    "checksum": _checksum(engine.model)}) + "\n")

        engine.update_weights = recorded
        if kind == "vllm":
            from fireflash.engines.vllm_serve import vllm_standin

            self.server = vllm_standin(engine, weight_transfer_config={"backend": "gloo"}, max_logprobs=32)
        else:
            self.server = EngineServer(engine)
        self.url = self.server.start()

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        self.server.close()


def _build_server(index: int, log: str, kind: str = "sglang") -> _InActorServer:
    return _InActorServer(index, log, kind)


def _client(url: str, kind: str, control: bool = False):
    """The client the runtime gives a server: a rollout worker's samples (vLLM: versions read from the server), the
    driver's pushes weights."""
    if kind == "vllm":
        from fireflash.engines.vllm import VLLMEngine

        return VLLMEngine(url, max_retries=0, transfer_backend="gloo", versions_from_server=not control)
    from fireflash.engines.sglang import SGLangEngine

    return SGLangEngine(url) if control else SGLangEngine(url, max_retries=0)


def _rollout_parts(index: int, kind: str = "sglang") -> RolloutParts:
    from fireflash.grading import make_grader
    from fireflash.models import build_tiny_tokenizer
    from fireflash.sandbox import make_backend
    from fireflash.sandbox.config import SandboxConfig

    graders = {}

    def grader_for(task):
        return graders.setdefault(task.id, make_grader(task.grader))

    return RolloutParts(backend=make_backend(SandboxConfig()), engine=None, tokenizer=build_tiny_tokenizer(),
                        grader_for=grader_for, connect=functools.partial(_client, kind=kind))


def _trainer(rank: int, world_size: int):
    from test_ray_backend import _trainer as trainer

    return trainer(rank, world_size)


def _runtime(
    tmp_path: Path, trainer_workers: int, engines: int, steps: int, weight_sync: str, kind: str = "sglang"
) -> RayRuntime:
    from fireflash.harness.config import HarnessConfig, SamplingConfig
    from fireflash.rl.config import ObjectiveConfig

    task = next(t for t in bundled_tasks("train") if t.id == "text-count-lines")
    placement = Placement(
        num_nodes=1, gpus_per_node=0, trainer_workers=trainer_workers, gpus_per_trainer_worker=0,
        cpus_per_trainer_worker=0.5, engine_kind=kind, engines=engines, gpus_per_engine=0,
        engines_in_workers=False, rollout_workers=1, cpus_per_rollout_worker=0.5, attempts_per_worker=4,
        cpus_per_engine=0.5, weight_sync=weight_sync,
    )
    harness = HarnessConfig(max_turns=3, context_window_tokens=4096, max_total_tokens=8192,
                            sampling=SamplingConfig(max_new_tokens_per_turn=64, n_top_logprobs=32))
    return RayRuntime(
        tasks=[task], build_rollout=functools.partial(_rollout_parts, kind=kind), build_trainer=_trainer, placement=placement, harness=harness,
        objective=ObjectiveConfig(loss_floor_tokens=64), run_dir=tmp_path, steps=steps, group_size=2,
        groups_per_step=1, max_inflight_attempts=4, max_attempt_retries=2, discard_zero_signal_groups=True, seed=0,
        max_worker_restarts=2, worker_start_timeout_sec=120, writer=MetricsWriter(tmp_path, tensorboard=False),
        max_queued_groups=64, build_server=functools.partial(_build_server, log=str(tmp_path / "updates.jsonl"),
                                                             kind=kind),
        connect_server=functools.partial(_client, kind=kind, control=True), weight_sync=weight_sync,
        weight_sync_timeout_sec=60,
    )




def _updates(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "updates.jsonl").read_text().splitlines()]


def _final_checksum(tmp_path: Path) -> tuple[int, float]:
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "checkpoints" / (tmp_path / "checkpoints" / "latest").read_text()
    version = json.loads((ckpt / "fireflash.json").read_text())["weight_version"]
    return version, _checksum(AutoModelForCausalLM.from_pretrained(ckpt))


def _trajectories(tmp_path: Path) -> list[Trajectory]:
    return [Trajectory.load(p) for p in (tmp_path / "trajectories").glob("g*/a*.json")]


# vLLM here too: ("vllm", 2) passed in 130 s on a loaded 2-core machine (session 18), over CI's time budget; the short
# run below covers vLLM's pushes, versions and weights, and this one its recovery when run by hand
@pytest.mark.parametrize(("kind", "engines"), [("sglang", 2), ("sglang", 1)],
                         ids=["another-server-takes-over", "the-only-server"])
def test_ray_loop_with_engine_servers_survives_a_killed_server(local_ray, tmp_path, kind, engines):
    runtime = _runtime(tmp_path, trainer_workers=2, engines=engines, steps=50, weight_sync="collective", kind=kind)
    seen: dict[str, object] = {}

    async def run_and_kill_a_server():
        run = asyncio.create_task(runtime.run())
        async with asyncio.timeout(180):
            while runtime.trainer.step < 1:
                await asyncio.sleep(0.05)
            while not runtime.servers[0].inflight:  # kill it with an attempt on it
                await asyncio.sleep(0.01)
        seen.update(version=runtime.trainer.weight_version, old_url=runtime.servers[0].url)
        ray.kill(runtime.servers[0].handle, no_restart=False)  # Ray restarts it (max_restarts)
        async with asyncio.timeout(180):  # back, rejoined, caught up, and serving attempts
            while not (runtime.servers[0].state == "up" and runtime.servers[0].restarts == 1):
                await asyncio.sleep(0.01)
            seen.update(up_version=runtime.trainer.weight_version)
            new_url = runtime.servers[0].url
            while not any(t.metadata.get("engine_url") == new_url for t in _trajectories(tmp_path)):
                await asyncio.sleep(0.2)
        seen.update(new_url=new_url)
        runtime.steps = runtime.trainer.step + 2  # end soon, with two more updates through the new group
        return await run

    history = asyncio.run(run_and_kill_a_server())

    steps = len(history)
    assert [m["weight_version"] for m in history] == [float(v) for v in range(1, steps + 1)]
    assert [r["step"] for r in read_metrics(tmp_path)] == list(range(1, steps + 1))
    assert seen["new_url"] != seen["old_url"]
    last = history[-1]
    assert last["engines/restarts"] == 1 and last["engines/up"] == engines
    # the killed server's in-flight attempts cost a try each and were retried: nothing lost
    assert sum(m["rollout/retries"] for m in history) >= 1
    assert sum(m["groups/lost_to_infrastructure"] for m in history) == 0 and runtime.total.lost_attempts == 0
    # both servers hold exactly the trainer's final weights (one broadcast, received by both)
    final_version, final_sum = _final_checksum(tmp_path)
    assert final_version == steps
    updates = _updates(tmp_path)
    for index in range(engines):
        mine = [u for u in updates if u["index"] == index]
        assert mine[-1]["version"] == steps and mine[-1]["checksum"] == pytest.approx(final_sum, rel=1e-12)
    # the restarted server got the newest weights before it sampled: nothing it sampled is older
    restarted = [u for u in updates if u["index"] == 0 and u["pid"] == runtime.servers[0].pid]
    assert restarted and 1 <= seen["version"] <= restarted[0]["version"] <= seen["up_version"]
    for t in _trajectories(tmp_path):
        if t.metadata.get("engine_url") == seen["new_url"]:
            versions = [v for seg in t.segments for v in seg.weight_version if v >= 0]
            assert versions and min(versions) >= restarted[0]["version"], t.attempt_id


@pytest.mark.parametrize(("kind", "weight_sync"), [("sglang", "disk"), ("vllm", "collective")],
                         ids=["sglang-from-disk", "vllm-through-its-transfer-group"])
def test_ray_loop_with_an_engine_server_takes_every_steps_weights(local_ray, tmp_path, kind, weight_sync):
    runtime = _runtime(tmp_path, trainer_workers=1, engines=1, steps=2, weight_sync=weight_sync, kind=kind)
    history = asyncio.run(runtime.run())

    assert [m["weight_version"] for m in history] == [1.0, 2.0]
    final_version, final_sum = _final_checksum(tmp_path)
    updates = _updates(tmp_path)
    assert [u["version"] for u in updates] == [0, 1, 2]  # tagged at start, then after every step
    assert updates[-1]["checksum"] == pytest.approx(final_sum, rel=1e-12) and final_version == 2
    if weight_sync == "disk":
        saved = sorted(p.name for p in (tmp_path / "weights").iterdir())
        assert saved == ["weights-v000001", "weights-v000002"]  # the newest two are kept
    trajectories = _trajectories(tmp_path)
    assert trajectories and all(t.metadata.get("engine_url") for t in trajectories)
    # every sampled token carries a version the server held (vLLM: read from /weight_info before each turn)
    versions = {v for t in trajectories for seg in t.segments for v in seg.weight_version if v >= 0}
    assert versions and versions <= {0, 1, 2}
