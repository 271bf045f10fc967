"""Weight sync: a trainer process and a server process (a local engine behind FireFlash's SGLang-compatible server,
driven by the real client in buckets) over a gloo group; the disk fallback; bucketing.

The spawned pair records everything; the tests compare it here against freshly loaded copies of the weights.
"""

import asyncio

import pytest
import torch

from fireflash.engines.local import LocalEngine
from fireflash.engines.serve import EngineServer
from fireflash.engines.sglang import SGLangEngine
from fireflash.engines.weight_sync import (
    DiskWeightSync,
    init_weight_update_group,
    plan_buckets,
    tensor_broadcaster,
)
from fireflash.engines.weights import specs_of
from fireflash.models import build_tiny_model, load_policy
from fireflash.protocols import GenerateRequest, Group, SamplingParams, Score, Segment, Trajectory
from fireflash.rl.config import ObjectiveConfig
from fireflash.training.config import TrainerConfig
from fireflash.training.fsdp import spawn_ranks
from fireflash.training.trainer import Trainer

pytestmark = pytest.mark.unit
VOCAB = 97
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8, n_top_logprobs=4)
PROMPTS = [[5, 9, 13, 2, 7], [11, 3, 3, 8, 40, 41]]
LONG_TOKENS = 600


def _trainer(seed=0):
    cfg = TrainerConfig(lr=1e-2, micro_batch_tokens=64)
    return Trainer(build_tiny_model(VOCAB, seed=seed), None, cfg, ObjectiveConfig(loss_floor_tokens=8), temperature=1.0)


def _groups(model, seed):
    """One group of two attempts whose tokens and rollout log-probs come from ``model`` (as tests/training do)."""
    gen = torch.Generator().manual_seed(seed)
    trajectories = []
    for i in range(2):
        ids = torch.randint(3, VOCAB, (12,), generator=gen)
        with torch.no_grad():
            logp = torch.log_softmax(model(ids[None]).logits[0], -1)
        mask = [0] * 4 + [1] * 8
        lps = [logp[t - 1, ids[t]].item() if m else 0.0 for t, m in enumerate(mask)]
        top = [logp[t - 1].topk(4) if m else None for t, m in enumerate(mask)]
        seg = Segment(
            token_ids=ids.tolist(), loss_mask=mask, rollout_logprobs=lps,
            topk_ids=[x.indices.tolist() if x is not None else [] for x in top],
            topk_logprobs=[x.values.tolist() if x is not None else [] for x in top],
            weight_version=[0 if m else -1 for m in mask],
        )
        trajectories.append(Trajectory(task_id="t", attempt_id=f"t/{i}", segments=[seg]))
    scores = [Score(reward=1.0, solved=True), Score(reward=0.0, solved=False)]
    return [Group(task_id="t", trajectories=trajectories, scores=scores, advantages=[1.0, -1.0])]


async def _greedy(engine):
    requests = [GenerateRequest(request_id=f"g{i}", prompt_ids=p, params=GREEDY) for i, p in enumerate(PROMPTS)]
    return [(r.token_ids, r.logprobs, r.weight_version) for r in await engine.generate(requests)]


def _trainer_side(port, out):
    trainer = _trainer()
    groups = _groups(trainer.model, seed=1)
    group = init_weight_update_group("127.0.0.1", port, rank=0, world_size=2, backend="gloo", timeout_sec=60)
    send = tensor_broadcaster(group)  # each tensor once, in order: SGLang's wire order
    sent = {}
    for _ in range(2):
        trainer.train_step(groups)
        sent[trainer.weight_version] = trainer.state_dict()
        torch.save(specs_of(sent[trainer.weight_version]), out / f"specs-{trainer.weight_version}.pt")
        send(list(sent[trainer.weight_version].items()))
    torch.save(sent, out / "sent.pt")


def _engine_side(port, out):
    """A LocalEngine behind FireFlash's SGLang-compatible server, fed by the real client in small buckets."""
    engine = LocalEngine(build_tiny_model(VOCAB), max_batch_size=4)
    server = EngineServer(engine)
    server.start()

    async def main():
        client = SGLangEngine(server.url, bucket_bytes=16 << 10, pause_mode="retract")  # several calls per update
        await client.init_weight_sync("127.0.0.1", port, world_size=2, backend="gloo")
        record = {0: await _greedy(client)}
        steps0 = engine.stats["decode_steps"]
        params = SamplingParams(temperature=1.0, max_new_tokens=LONG_TOKENS, n_top_logprobs=0, seed=3)
        long = asyncio.ensure_future(client.generate([GenerateRequest(request_id="long", prompt_ids=[4, 5, 6],
                                                                      params=params)]))
        while engine.stats["decode_steps"] == steps0:  # the long request is decoding before any update arrives
            await asyncio.sleep(0.001)
        in_flight, n_calls = {}, {}
        for version in (1, 2):
            path = out / f"specs-{version}.pt"
            while not path.exists():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # written completely
            specs = torch.load(path, weights_only=False)
            n_calls[version] = len(plan_buckets(specs, client.bucket_bytes))
            await client.receive_broadcast(specs, version)
            in_flight[version] = not long.done()
            record[version] = await _greedy(client)
        (long_result,) = await long
        await client.close()
        return {"record": record, "in_flight": in_flight, "n_calls": n_calls, "versions_seen": engine.weight_version,
                "long": (long_result.weight_version, long_result.finish_reason, len(long_result.token_ids))}

    try:
        torch.save(asyncio.run(main()), out / "engine.pt")
    finally:
        server.close()


def _pair(rank, world_size, port, out):
    torch.set_num_threads(1)
    (_trainer_side if rank == 0 else _engine_side)(port, out)


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("weight_sync")
    spawn_ranks(_pair, world_size=2, args=(out,), timeout_sec=90)
    return torch.load(out / "sent.pt", weights_only=False), torch.load(out / "engine.pt", weights_only=False)


async def _fresh_greedy(state):
    model = build_tiny_model(VOCAB, seed=5)  # other initial weights: everything must come from ``state``
    model.load_state_dict(state)
    engine = LocalEngine(model)
    try:
        return await _greedy(engine)
    finally:
        await engine.close()


def _same_outputs(got, expected, version):
    for (ids, lps, v), (ids_ref, lps_ref, _) in zip(got, expected, strict=True):
        assert v == version and ids == ids_ref
        torch.testing.assert_close(torch.tensor(lps), torch.tensor(lps_ref), atol=1e-5, rtol=0)


def test_engine_outputs_follow_each_version_like_a_fresh_copy(sync_run):
    sent, engine = sync_run
    assert engine["versions_seen"] == 2 and sorted(engine["record"]) == [0, 1, 2]
    assert min(engine["n_calls"].values()) > 1  # bucketed: each update took several calls
    for version in (1, 2):
        _same_outputs(engine["record"][version], asyncio.run(_fresh_greedy(sent[version])), version)
    outputs = [engine["record"][v] for v in (0, 1, 2)]
    assert outputs[0] != outputs[1] != outputs[2]  # each step changed what the engine samples


def test_attempt_in_flight_finishes_on_its_weights(sync_run):
    _, engine = sync_run
    assert engine["in_flight"][1]  # the update landed while the long request was decoding
    assert engine["long"] == (0, "length", LONG_TOKENS)


def test_disk_fallback_installs_an_hf_directory(tmp_path):
    trainer = _trainer()
    engine = LocalEngine(build_tiny_model(VOCAB))
    sync = DiskWeightSync(tmp_path, trainer.model, keep=2)

    async def run():
        paths = []
        for _ in range(3):
            trainer.train_step(_groups(trainer.model, seed=1))
            paths.append(await sync.publish([engine], trainer.state_dict(), trainer.weight_version))
        got = await _greedy(engine)
        await engine.close()
        return paths, got

    paths, got = asyncio.run(run())
    assert [p.name for p in sorted(tmp_path.glob("weights-v*"))] == ["weights-v000002", "weights-v000003"]
    _same_outputs(got, asyncio.run(_fresh_greedy(load_policy(str(paths[-1])).state_dict())), 3)


def test_buckets_keep_order_and_the_size_limit():
    specs = specs_of([("a", torch.zeros(4)), ("b", torch.zeros(4)), ("c", torch.zeros(20)), ("d", torch.zeros(2,
                      dtype=torch.bfloat16))])
    assert [[x.name for x in bucket] for bucket in plan_buckets(specs, bucket_bytes=32)] == [["a", "b"], ["c"], ["d"]]
    with pytest.raises(ValueError, match="bucket_bytes=0 must be >= 1"):
        plan_buckets(specs, 0)


def test_bad_group_arguments_name_the_fix():
    with pytest.raises(ValueError, match="'nccl'"):
        init_weight_update_group("127.0.0.1", 1, rank=0, world_size=2, backend="mpi")
    with pytest.raises(ValueError, match="rank 2"):
        init_weight_update_group("127.0.0.1", 1, rank=2, world_size=2)
