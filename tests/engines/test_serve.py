"""FireFlash's SGLang-compatible server, driven by the real ``SGLangEngine`` client.

Generation through the server equals the engine's own; disk and collective weight updates (a trainer process
over a real gloo group) equal freshly loaded copies of the new weights; bad bodies answer 400 naming the field.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
import pytest
import torch

from fireflash.engines.http import EngineRequestError, JSONClient, WeightSyncFailed
from fireflash.engines.local import LocalEngine
from fireflash.engines.scripted import ScriptedEngine
from fireflash.engines.serve import EngineServer
from fireflash.engines.serve_process import launch_fireflash_server
from fireflash.engines.sglang import SGLangEngine
from fireflash.engines.weight_sync import init_weight_update_group, tensor_broadcaster
from fireflash.engines.weights import TensorSpec, specs_of
from fireflash.models import build_tiny_model, kv_cache_name
from fireflash.protocols import GenerateRequest, SamplingParams
from fireflash.training.fsdp import free_port, spawn_ranks

pytestmark = pytest.mark.unit
VOCAB = 97
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8, n_top_logprobs=4)
PROMPTS = [[5, 9, 13, 2, 7], [11, 3, 3, 8, 40, 41], [60, 61, 2], [7] * 9]
GROUP = "weight_update_group"
EOS = build_tiny_model(VOCAB).config.eos_token_id
STOP_AT_EOS = GREEDY.model_copy(update={"stop_token_ids": [EOS]})  # what a server that knows the EOS id does


def _engine(seed: int = 0, **kwargs) -> LocalEngine:
    kwargs.setdefault("num_threads", 1)
    return LocalEngine(build_tiny_model(VOCAB, seed=seed), **kwargs)


def _requests(params: SamplingParams = GREEDY, prefix: str = "g") -> list[GenerateRequest]:
    return [GenerateRequest(request_id=f"{prefix}{i}", prompt_ids=p, params=params) for i, p in enumerate(PROMPTS)]


@contextlib.contextmanager
def _served(engine, **kwargs):
    server = EngineServer(engine, **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.close()


def _same(got, expected, atol=1e-6):
    """Same ids, top-k ids and finish reasons; logprobs within ``atol``."""
    for a, b in zip(got, expected, strict=True):
        assert (a.request_id, a.token_ids, a.topk_ids, a.finish_reason) == (
            b.request_id, b.token_ids, b.topk_ids, b.finish_reason)
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=atol, rtol=0)
        torch.testing.assert_close(torch.tensor(a.topk_logprobs), torch.tensor(b.topk_logprobs), atol=atol, rtol=0)


def _differ(a, b) -> bool:
    """Two result lists sample differently or score their tokens differently (by more than 1e-3): the tiny
    random models often repeat a prompt token greedily under every seed, so ids alone cannot tell them apart."""
    return any(x.token_ids != y.token_ids or max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) > 1e-3
               for x, y in zip(a, b, strict=True))


def _fresh(state, params: SamplingParams = GREEDY) -> list:
    """Greedy results of a new engine over ``state`` (other initial weights: everything must come from ``state``)."""
    model = build_tiny_model(VOCAB, seed=99)
    model.load_state_dict(state)
    engine = LocalEngine(model, num_threads=1)

    async def run():
        try:
            return await engine.generate(_requests(params))
        finally:
            await engine.close()

    return asyncio.run(run())


def _weights(seed: int) -> dict[str, torch.Tensor]:
    return build_tiny_model(VOCAB, seed=seed).state_dict()


# ───────────────────────────── generation ─────────────────────────────


def test_client_through_the_server_gets_what_the_engine_returns(assert_matches_teacher):
    """Sampled (T = 1, per-request seeds) and greedy, several requests at once: equal to the same engine called
    directly, logprobs within 1e-6, and to a teacher-forced pass; the requests were decoded together."""
    engine = _engine(prefix_cache_tokens=0, max_batch_size=8)
    sampled = SamplingParams(temperature=1.0, max_new_tokens=16, n_top_logprobs=4, stop_token_ids=list(range(3, 13)))
    requests = _requests(sampled, "s") + _requests(prefix="g")
    direct = asyncio.run(engine.generate(requests))
    steps_before = engine.stats["decode_steps"]
    with _served(engine) as server:
        client = SGLangEngine(server.url)
        served = asyncio.run(client.generate(requests))
        steps = engine.stats["decode_steps"] - steps_before
    _same(served, direct)
    reference = build_tiny_model(VOCAB)
    for req, res in zip(requests, served, strict=True):
        assert res.weight_version == 0
        assert_matches_teacher(reference, req, res, atol=1e-4)
    assert {r.finish_reason for r in served} == {"stop", "length"}  # both mappings exercised
    assert steps < sum(len(r.token_ids) for r in served) / 2  # concurrent HTTP requests shared forward passes


def test_scripted_engine_receives_the_clients_request_unchanged(tok):
    engine = ScriptedEngine(tok, ["hello there", "second"])
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=12, stop_token_ids=[2], n_top_logprobs=3, seed=5)
    with _served(engine) as server:
        (res,) = asyncio.run(SGLangEngine(server.url, send_sampling_seed=True).generate(
            [GenerateRequest(request_id="attempt-7/turn-3", prompt_ids=[1, 5, 6], params=params)]))
    (seen,) = engine.requests
    assert seen.request_id == "attempt-7/turn-3"  # the rid of each HTTP try, less the client's fresh suffix
    assert seen.prompt_ids == [1, 5, 6] and seen.params == params
    assert res.request_id == "attempt-7/turn-3" and res.token_ids == tok.encode("hello there") + [2]
    assert res.finish_reason == "stop" and len(res.topk_ids[0]) == 3


def _post(url: str, max_new_tokens: int, **sampling) -> dict:
    body = {"input_ids": PROMPTS[0], "sampling_params": {"temperature": 1.0, "sampling_seed": 5, "no_stop_trim": True,
                                                          "max_new_tokens": max_new_tokens, **sampling}}
    response = httpx.post(url + "/generate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_stop_handling_is_sglangs_with_and_without_ignore_eos():
    """schedule_batch.Req._check_token_based_finish: without ignore_eos a request stops at stop_token_ids or the
    model's EOS ids; with ignore_eos it checks neither and runs to max_new_tokens."""
    seeded = SamplingParams(temperature=1.0, max_new_tokens=8, n_top_logprobs=0, seed=5)
    free = asyncio.run(_engine().generate(_requests(seeded)))[0].token_ids  # 8 tokens, no stops
    first, eos = list(dict.fromkeys(free))[:2]  # two distinct tokens, in order of first appearance
    n_eos = free.index(eos) + 1
    with _served(_engine(), eos_token_ids=[eos]) as server:
        ignoring = _post(server.url, 8, ignore_eos=True, stop_token_ids=[first, eos])
        at_eos = _post(server.url, 8)
        at_stop = _post(server.url, 8, stop_token_ids=[first])
    assert ignoring["output_ids"] == free and ignoring["meta_info"]["finish_reason"]["type"] == "length"
    assert at_eos["output_ids"] == free[:n_eos]
    assert at_eos["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    assert at_stop["output_ids"] == [first] and at_stop["meta_info"]["finish_reason"]["type"] == "stop"


def test_model_eos_ids_come_from_the_generation_config():
    from fireflash.engines.serve_process import model_eos_ids

    model = build_tiny_model(VOCAB)
    assert model_eos_ids(model) == [model.config.eos_token_id]
    model.generation_config.eos_token_id = [2, 7]
    assert model_eos_ids(model) == [2, 7] and model_eos_ids(None) == []


def test_pause_abort_ends_in_flight_requests_and_holds_new_ones():
    """tokenizer_manager.pause_generation(mode='abort'): every running request returns with finish_reason abort
    (the client retries it as an ABORTED try); new requests wait for /continue_generation."""
    long = SamplingParams(temperature=1.0, max_new_tokens=4000, n_top_logprobs=0, seed=1)

    async def main(url):
        client = SGLangEngine(url, pause_mode="abort")
        running = asyncio.ensure_future(client.generate([GenerateRequest(request_id="long", prompt_ids=[4, 5],
                                                                         params=long)]))
        await asyncio.sleep(0.5)
        await client.pause()
        (aborted,) = await asyncio.wait_for(running, 30)
        later = asyncio.ensure_future(client.generate(_requests()))
        await asyncio.sleep(0.3)
        held = not later.done()
        await client.resume()
        return aborted, held, await later

    with _served(_engine()) as server:
        aborted, held, later = asyncio.run(main(server.url))
    assert aborted.finish_reason == "abort" and held
    assert {r.finish_reason for r in later} <= {"stop", "length"}


def test_pause_retract_resumes_turns_on_the_new_weights_and_reports_spans():
    """Issue 31, the recipe's pause mode (configs/cluster.toml): SGLang's 'retract' sends running requests back to the
    waiting queue; after /continue_generation they are prefilled again and sample on under the weights installed
    meanwhile, and the answer lists meta_info.weight_versions spans. The stand-in used to finish them on the old
    weights (a single version): the trainer never met a turn that spans two."""
    new_model = build_tiny_model(VOCAB, seed=7)
    prompt, n = [4, 5, 6], 800  # long enough to be running at the pause on a fast machine

    async def main(url, engine):
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            body = {"input_ids": prompt, "rid": "turn", "return_logprob": True, "top_logprobs_num": 0,
                    "logprob_start_len": -1, "sampling_params": {"temperature": 1.0, "max_new_tokens": n,
                                                                 "ignore_eos": True, "no_stop_trim": True}}
            running = asyncio.ensure_future(http.post("/generate", json=body))
            await asyncio.sleep(0.3)
            assert (await http.post("/pause_generation", json={"mode": "retract"})).status_code == 200
            await engine.update_weights(new_model.state_dict(), 1)  # what a paused weight route installs
            await asyncio.sleep(0.2)
            assert not running.done()  # retracted, not aborted: it waits for continue
            await http.post("/continue_generation")
            return (await running).json()

    engine = _engine()
    with _served(engine) as server:
        answer = asyncio.run(main(server.url, engine))
    meta, ids = answer["meta_info"], answer["output_ids"]
    assert len(ids) == n and meta["finish_reason"]["type"] == "length"
    (old, new) = meta["weight_versions"]
    assert (old["version"], old["start"], new["version"], new["end"]) == ("0", 0, "1", n)
    assert 0 < old["end"] == new["start"] < n and meta["weight_version"] == "1"
    # the tokens after the retract are the new model's: their logprobs are its, with every earlier token as context
    k = new["start"]
    with torch.no_grad():
        logq = torch.log_softmax(new_model(torch.tensor([prompt + ids[:-1]])).logits[0, len(prompt) - 1:].float(), -1)
    expected = logq.gather(1, torch.tensor(ids)[:, None])[:, 0]
    got = torch.tensor([lp for lp, _, _ in meta["output_token_logprobs"]])
    torch.testing.assert_close(got[k:], expected[k:], atol=1e-4, rtol=0)
    assert not torch.allclose(got[:k], expected[:k], atol=1e-4)  # the old model sampled the first stretch


def test_pause_in_place_goes_on_over_the_old_kv_on_the_new_weights_and_reports_spans(tmp_path):
    """Issue 31: SGLang's 'in_place' leaves running requests in its batch with their KV cache
    (io_struct.PauseGenerationReqInput); after an update and /continue_generation they decode on the new weights on top
    of that old KV (not recomputed, unlike 'retract'), and the answer lists meta_info.weight_versions spans. The
    stand-in used to finish them on the old weights, one version. The client counts the oldest for staleness."""
    new_model = build_tiny_model(VOCAB, seed=7)
    new_model.save_pretrained(tmp_path, safe_serialization=True)
    prompt, n = [4, 5, 6], 800  # long enough to be decoding at the pause on a fast machine

    async def main(url):
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            body = {"input_ids": prompt, "rid": "turn", "return_logprob": True, "top_logprobs_num": 0,
                    "logprob_start_len": -1, "sampling_params": {"temperature": 1.0, "max_new_tokens": n,
                                                                 "ignore_eos": True, "no_stop_trim": True}}
            running = asyncio.ensure_future(http.post("/generate", json=body))
            await asyncio.sleep(0.3)
            assert (await http.post("/pause_generation", json={"mode": "in_place"})).status_code == 200
            update = await http.post("/update_weights_from_disk", json={
                "model_path": str(tmp_path), "weight_version": "1", "flush_cache": False})
            assert update.json()["success"], update.text
            await asyncio.sleep(0.2)
            assert not running.done()  # paused in place: it waits for continue
            await http.post("/continue_generation")
            return (await running).json()

    with _served(_engine()) as server:
        answer = asyncio.run(main(server.url))
    meta, ids = answer["meta_info"], answer["output_ids"]
    assert len(ids) == n and meta["finish_reason"]["type"] == "length"
    (old, new) = meta["weight_versions"]
    assert (old["version"], old["start"], new["version"], new["end"]) == ("0", 0, "1", n)
    k = new["start"]
    assert 0 < old["end"] == k < n and meta["weight_version"] == "1"

    def logq(logits, tokens):
        return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]

    seq, p = prompt + ids, len(prompt)
    old_model = build_tiny_model(VOCAB, seed=0)  # the served engine's first weights (_engine)
    with torch.no_grad():
        # at the pause the KV held every position before the last sampled token's, written by the old weights
        cache = kv_cache_name()  # ``cache`` since transformers 5.24, ``past_key_values`` before
        kv = getattr(old_model(torch.tensor([seq[: p + k - 1]]), use_cache=True), cache)
        on_old_kv = new_model(torch.tensor([seq[p + k - 1 : -1]]), use_cache=True, **{cache: kv}).logits[0]
        all_old = old_model(torch.tensor([seq[:-1]])).logits[0, p - 1 :]
        all_new = new_model(torch.tensor([seq[:-1]])).logits[0, p - 1 :]
    got = torch.tensor([lp for lp, _, _ in meta["output_token_logprobs"]])
    torch.testing.assert_close(got[:k], logq(all_old[:k], ids[:k]), atol=1e-4, rtol=0)
    torch.testing.assert_close(got[k:], logq(on_old_kv, ids[k:]), atol=1e-4, rtol=0)
    assert not torch.allclose(got[k:], logq(all_new[k:], ids[k:]), atol=1e-4)  # the old KV was kept, not recomputed

    replay = httpx.MockTransport(lambda _: httpx.Response(200, json=answer))
    client = SGLangEngine("http://sglang.test:30000", transport=replay)
    (res,) = asyncio.run(client.generate([GenerateRequest(request_id="turn", prompt_ids=prompt, params=SamplingParams(
        temperature=1.0, max_new_tokens=n))]))
    assert res.weight_version == 0 and res.token_ids == ids  # staleness counts from the oldest version


# ───────────────────────────── bad requests ─────────────────────────────

GOOD = {"input_ids": [5, 6], "rid": "r", "return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": -1,
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 3, "ignore_eos": True, "no_stop_trim": True}}


def _with(path: str, value) -> dict:
    body = {**GOOD, "sampling_params": dict(GOOD["sampling_params"])}
    node, *rest = path.split(".")
    if rest:
        body[node][rest[0]] = value
    elif value is _MISSING:
        del body[node]
    else:
        body[node] = value
    return body


_MISSING = object()


@pytest.mark.parametrize(
    "field,value",
    [
        ("input_ids", _MISSING),
        ("input_ids", [[5, 6], [7]]),
        ("input_ids", "5 6"),
        ("input_ids", [5, "6"]),
        ("input_ids", []),
        ("text", "hello"),
        ("sampling_params.max_new_tokens", -1),
        ("sampling_params.temperature", "hot"),
        ("sampling_params.no_stop_trim", False),
        ("sampling_params.top_k", 5),
        ("logprob_start_len", 0),
        ("stream", True),
    ],
)
def test_bad_generate_bodies_answer_400_naming_the_field(tok, field, value):
    with _served(ScriptedEngine(tok, [[4, 4]])) as server:
        response = httpx.post(server.url + "/generate", json=_with(field, value))
        assert response.status_code == 400, response.text
        body = response.json()  # SGLang's ErrorResponse (tests/engines/contracts/sglang_0.5/error_bad_body.json)
        assert body["object"] == "error" and body["code"] == 400 and body["param"].startswith(field), body
        good = httpx.post(server.url + "/generate", json=GOOD)  # the server is unharmed
        assert good.status_code == 200 and good.json()["output_ids"] == [4, 4]


def test_client_reports_the_blamed_field_and_engine_errors():
    async def main(url):
        http = JSONClient(url, max_retries=0)
        with pytest.raises(EngineRequestError, match="field 'sampling_params.max_new_tokens'"):
            await http.post("/generate", _with("sampling_params.max_new_tokens", -1))
        with pytest.raises(EngineRequestError, match="rejected \\(HTTP 400\\): .*outside the vocabulary"):
            await http.post("/generate", _with("input_ids", [5, VOCAB + 3]))
        with pytest.raises(EngineRequestError, match="field 'mode'"):
            await http.post("/pause_generation", {"mode": "later"})
        await http.aclose()

    with _served(_engine()) as server:
        asyncio.run(main(server.url))


def test_weight_routes_refuse_unknown_groups_and_bad_specs():
    async def main(url):
        client = SGLangEngine(url, group_name="nobody")
        with pytest.raises(WeightSyncFailed, match="unknown weight-update group 'nobody'"):
            await client.receive_broadcast([TensorSpec("w", "float32", (2,))], 1)
        with pytest.raises(EngineRequestError, match="unknown weight-update group 'nobody'"):
            await client.destroy_weight_sync()
        with pytest.raises(WeightSyncFailed, match="backend 'mpi'"):
            await client.init_weight_sync("127.0.0.1", 1, world_size=2, backend="mpi")
        http = JSONClient(url, max_retries=0)
        with pytest.raises(EngineRequestError, match="weight_version"):
            await http.post("/update_weights_from_disk", {"model_path": "/tmp", "weight_version": "v2"})
        with pytest.raises(EngineRequestError, match="abort_all_requests"):
            await http.post("/update_weights_from_disk", {"model_path": "/tmp", "weight_version": "2",
                                                          "abort_all_requests": True})
        await http.aclose()
        return client.weight_version

    engine = _engine()
    with _served(engine) as server:
        assert asyncio.run(main(server.url)) == 0
        assert httpx.get(server.url + "/get_model_info").json()["weight_version"] == "0"


# ───────────────────────────── disk updates, pause ─────────────────────────────


def test_disk_update_matches_a_fresh_copy_and_bad_weights_change_nothing(tmp_path):
    build_tiny_model(VOCAB, seed=3).save_pretrained(tmp_path / "v1", safe_serialization=True)
    build_tiny_model(VOCAB, seed=3, hidden_size=32).save_pretrained(tmp_path / "bad", safe_serialization=True)
    engine = _engine()

    async def main(url):
        client = SGLangEngine(url)
        before = await client.generate(_requests())
        await client.update_weights(tmp_path / "v1", 1)
        after = await client.generate(_requests())
        with pytest.raises(EngineRequestError, match="not a directory"):
            await client.update_weights(tmp_path / "missing", 2)
        with pytest.raises(EngineRequestError, match="shapes differ"):
            await client.update_weights(tmp_path / "bad", 2)
        still = await client.generate(_requests())
        return before, after, still

    with _served(engine, model_path="tiny") as server:
        before, after, still = asyncio.run(main(server.url))
        info = httpx.get(server.url + "/get_model_info").json()
    assert info == {"model_path": "tiny", "weight_version": "1", "is_generation": True}
    fresh = _fresh(_weights(3))
    _same(after, fresh)
    _same(still, fresh)
    assert all(r.weight_version == 1 for r in after + still)
    assert _differ(before, after)  # so not installing would fail `_same`


def test_paused_server_stays_paused_through_an_update(tmp_path):
    """/pause_generation holds new requests; an update meanwhile keeps the pause; after /continue_generation they
    run on the new version."""
    build_tiny_model(VOCAB, seed=4).save_pretrained(tmp_path, safe_serialization=True)

    async def main(url):
        client = SGLangEngine(url, pause_mode="retract")
        await client.pause()
        pending = asyncio.ensure_future(client.generate(_requests()))
        await asyncio.sleep(0.3)
        held = not pending.done()
        await client.update_weights(tmp_path, 1)
        await asyncio.sleep(0.3)
        held_after_update = not pending.done()
        await client.resume()
        return held, held_after_update, await pending

    with _served(_engine()) as server:
        held, held_after_update, results = asyncio.run(main(server.url))
    assert held and held_after_update
    assert all(r.weight_version == 1 for r in results)
    _same(results, _fresh(_weights(4)))


def test_fireflash_serve_reports_a_missing_model_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from fireflash.cli import app

    result = CliRunner().invoke(app, ["serve", str(tmp_path / "nope"), "--port", "0", "engine.num_threads=1"])
    assert result.exit_code == 2 and "ModelNotFound" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "nope"), "engine.max_batch_size=0"])
    assert result.exit_code == 2 and "engine.max_batch_size" in result.output


# ───────────────────────────── collective updates over gloo ─────────────────────────────


def _wait_for(path: Path, timeout_sec: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_sec
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)


def _trainer(rank, world_size, _spawn_port, phases, out):
    """Group rank 0: per phase (port, world size, seeds), join when ``out/go-{i}`` exists, broadcast each seed's
    weights once (what ``SGLangEngine.receive_broadcast`` receives), then leave."""
    torch.set_num_threads(1)
    for i, (port, world, seeds) in enumerate(phases):
        _wait_for(out / f"go-{i}")
        group = init_weight_update_group("127.0.0.1", port, rank=0, world_size=world, backend="gloo", timeout_sec=60)
        send = tensor_broadcaster(group)
        for seed in seeds:
            send(list(_weights(seed).items()))
        torch.distributed.destroy_process_group(group)


def test_collective_updates_match_fresh_copies_and_groups_can_be_replaced(tok, tmp_path):
    """A trainer process joins as rank 0 while the client asks the server to join (the server keeps generating
    meanwhile); two broadcasts, two versions; /destroy, then a new group with the same name works. Joining a group
    twice, or from a second server in the same process, is refused before any rendezvous."""
    specs = specs_of(_weights(0))
    ports = [free_port(), free_port()]
    phases = [(ports[0], 2, [11, 12]), (ports[1], 2, [13])]
    engine = _engine()

    async def main(url):
        client = SGLangEngine(url)
        trainer = asyncio.ensure_future(asyncio.to_thread(spawn_ranks, _trainer, 1, (phases, tmp_path), 90))
        joining = asyncio.ensure_future(client.init_weight_sync("127.0.0.1", ports[0], world_size=2, backend="gloo"))
        during = await client.generate(_requests())  # the server is waiting in the rendezvous: it still serves
        joined_early = joining.done()
        (tmp_path / "go-0").touch()
        await joining
        with pytest.raises(WeightSyncFailed, match="already is .* a member of group"):
            await client.init_weight_sync("127.0.0.1", ports[0], world_size=2, backend="gloo")
        with _served(ScriptedEngine(tok)) as neighbour:  # torch keys groups by name: once per process
            neighbour_client = SGLangEngine(neighbour.url)
            with pytest.raises(WeightSyncFailed, match="one process can join a group name once"):
                await neighbour_client.init_weight_sync("127.0.0.1", ports[0], world_size=2, backend="gloo")
        record = {0: during}
        for version in (1, 2):
            await client.receive_broadcast(specs, version)
            record[version] = await client.generate(_requests())
        await client.destroy_weight_sync()
        with pytest.raises(WeightSyncFailed, match="unknown weight-update group"):
            await client.receive_broadcast(specs, 3)
        (tmp_path / "go-1").touch()
        await client.init_weight_sync("127.0.0.1", ports[1], world_size=2, backend="gloo")
        await client.receive_broadcast(specs, 3)
        record[3] = await client.generate(_requests())
        await trainer
        return joined_early, record, client.weight_version

    with _served(engine) as server:
        joined_early, record, version = asyncio.run(main(server.url))
    assert not joined_early and version == 3
    for v, seed in ((1, 11), (2, 12), (3, 13)):
        assert all(r.weight_version == v for r in record[v])
        _same(record[v], _fresh(_weights(seed)))
    for v in range(3):
        assert _differ(record[v], record[v + 1])  # so skipping an install would fail `_same`


@pytest.mark.integration
def test_two_servers_in_one_group_receive_one_broadcast(tmp_path):
    """World size 3: an in-process server (rank 1) and one launched with ``launch_fireflash_server`` (rank 2, the
    tiny model saved to disk) receive a single broadcast from the trainer."""
    build_tiny_model(VOCAB).save_pretrained(tmp_path / "model", safe_serialization=True)
    port, remote_port = free_port(), free_port()
    specs = specs_of(_weights(0))
    children = []

    async def main(url):
        trainer = asyncio.ensure_future(asyncio.to_thread(spawn_ranks, _trainer, 1, ([(port, 3, [21])], tmp_path), 90))
        children.append(await asyncio.to_thread(
            launch_fireflash_server, str(tmp_path / "model"), remote_port, {"num_threads": 1}, timeout_sec=60,
            log_path=tmp_path / "server.log"))
        clients = [SGLangEngine(url), SGLangEngine(f"http://127.0.0.1:{remote_port}")]
        first = await asyncio.gather(*(c.generate(_requests()) for c in clients))
        (tmp_path / "go-0").touch()
        await asyncio.gather(*(c.init_weight_sync("127.0.0.1", port, world_size=3, rank_offset=1 + i, backend="gloo")
                               for i, c in enumerate(clients)))
        await asyncio.gather(*(c.receive_broadcast(specs, 1) for c in clients))
        after = await asyncio.gather(*(c.generate(_requests()) for c in clients))
        await trainer
        return first, after

    try:  # the launched server stops at the model's EOS ids, as SGLang does; so does this one, and _fresh
        with _served(_engine(), eos_token_ids=[EOS]) as server:
            first, after = asyncio.run(main(server.url))
    finally:
        for child in children:
            child.terminate()
            child.wait(30)
    assert children[0].returncode == 0  # SIGTERM closes the server cleanly
    _same(first[1], first[0])  # the launched server serves the saved weights
    fresh = _fresh(_weights(21), STOP_AT_EOS)
    for results in after:
        assert all(r.weight_version == 1 for r in results)
        _same(results, fresh)
    assert _differ(first[0], fresh)
