"""Contract tests: the SGLang and vLLM clients against loopback servers speaking the documented shapes."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
import torch

from fireflash.engines import EngineConfig, make_engine
from fireflash.engines.http import (
    EngineHTTPError,
    EngineRequestError,
    EngineTimeout,
    WeightSyncFailed,
    WeightVersionMissing,
    flags_from_args,
)
from fireflash.engines.sglang import SGLangEngine
from fireflash.engines.sglang_launch import sglang_command
from fireflash.engines.vllm import VLLMEngine, vllm_command
from fireflash.protocols import Engine, GenerateRequest, SamplingParams

pytestmark = pytest.mark.unit


def request(rid="r1", prompt=(5, 6, 7), **params) -> GenerateRequest:
    params.setdefault("max_new_tokens", 6)
    params.setdefault("n_top_logprobs", 4)
    return GenerateRequest(request_id=rid, prompt_ids=list(prompt), params=SamplingParams(**params))


def run(coro):
    return asyncio.run(coro)


# ───────────────────────────── SGLang ─────────────────────────────


def test_sglang_generate_sends_native_fields_and_parses_meta_info(sglang_server):
    engine = SGLangEngine(sglang_server.url)
    assert isinstance(engine, Engine)
    (res,) = run(engine.generate([request(temperature=0.7, stop_token_ids=[99], seed=3)]))
    path, _, body = sglang_server.calls[-1]
    assert path == "/generate"
    assert body["input_ids"] == [5, 6, 7] and body["rid"].startswith("r1-")
    assert (
        body["return_logprob"] is True and body["top_logprobs_num"] == 4 and body["logprob_start_len"] == -1
    )
    sp = body["sampling_params"]
    assert (sp["temperature"], sp["max_new_tokens"], sp["stop_token_ids"]) == (0.7, 6, [99])
    # SGLang's ignore_eos also skips stop_token_ids (schedule_batch._check_token_based_finish): never sent true
    assert sp["ignore_eos"] is False and sp["no_stop_trim"] is True
    assert "sampling_seed" not in sp  # SGLang honours it only with --enable-deterministic-inference
    assert res.token_ids == [(18 + 7 * i) % 50 for i in range(6)]
    assert res.logprobs == pytest.approx([-0.1 - 0.01 * t for t in res.token_ids])
    assert res.topk_ids[0] == [res.token_ids[0] + j for j in range(4)]
    assert res.finish_reason == "length" and res.weight_version == 0 and res.n_cached_prompt_tokens == 3


def test_sglang_stop_finish_reason(sglang_server):
    (res,) = run(SGLangEngine(sglang_server.url).generate([request(stop_token_ids=[25])]))
    assert res.finish_reason == "stop" and res.token_ids[-1] == 25


def test_sglang_weight_update_from_disk_sets_version(sglang_server, tmp_path):
    async def main():
        engine = SGLangEngine(sglang_server.url)
        await engine.pause()
        await engine.update_weights(tmp_path, version=4)
        await engine.resume()
        (res,) = await engine.generate([request()])
        with pytest.raises(EngineRequestError, match="not found"):
            await engine.update_weights(__import__("pathlib").Path("/missing/ckpt"), version=5)
        return engine, res

    engine, res = run(main())
    assert res.weight_version == 4 and engine.weight_version == 4
    calls = {c[0]: c[2] for c in sglang_server.calls}
    assert calls["/pause_generation"] == {"mode": "abort"} and calls["/continue_generation"] == {}
    assert calls["/update_weights_from_disk"]["weight_version"] == "5"  # the refused one, recorded last
    assert sglang_server.paths().index("/pause_generation") < sglang_server.paths().index(
        "/continue_generation"
    )


def test_sglang_weight_update_from_state_dict_over_the_group(sglang_server):
    sent = []
    state = {"a.weight": torch.zeros(2, 3), "b.bias": torch.ones(4, dtype=torch.bfloat16)}

    async def main():
        with pytest.raises(ValueError, match="broadcast"):
            await SGLangEngine(sglang_server.url).update_weights(state, version=1)
        engine = SGLangEngine(sglang_server.url, broadcast=lambda named: sent.extend(n for n, _ in named))
        await engine.init_weight_sync("10.0.0.1", 29500, world_size=2)
        await engine.update_weights(state, version=2)
        return engine

    engine = run(main())
    calls = {c[0]: c[2] for c in sglang_server.calls}
    assert calls["/init_weights_update_group"] == {
        "master_address": "10.0.0.1",
        "master_port": 29500,
        "rank_offset": 1,
        "world_size": 2,
        "group_name": "weight_update_group",
        "backend": "nccl",
    }
    body = calls["/update_weights_from_distributed"]
    assert body["names"] == ["a.weight", "b.bias"] and body["dtypes"] == ["float32", "bfloat16"]
    assert body["shapes"] == [[2, 3], [4]] and body["weight_version"] == "2"
    assert sent == ["a.weight", "b.bias"] and engine.weight_version == 2


def test_sglang_state_dict_moves_in_buckets_under_a_pause(sglang_server):
    """One /update_weights_from_distributed per bucket, each listing only its tensors; flush_cache and the version
    on the last call only; several buckets go between /pause_generation and /continue_generation."""
    state = {"a": torch.zeros(64), "b": torch.zeros(64), "c": torch.zeros(100), "d": torch.zeros(8)}  # fp32: 4 B each
    sent = []

    async def main(bucket_bytes):
        engine = SGLangEngine(sglang_server.url, pause_mode="retract", bucket_bytes=bucket_bytes,
                              broadcast=lambda named: sent.extend(n for n, _ in named))
        await engine.update_weights(state, version=3)
        return engine

    engine = run(main(512))  # a+b = 512 B; c = 400 B; d = 32 B fits beside c
    assert sglang_server.paths() == ["/pause_generation", *["/update_weights_from_distributed"] * 2,
                                     "/continue_generation"]
    assert sglang_server.calls[0][2] == {"mode": "retract"}
    first, last = (c[2] for c in sglang_server.calls[1:3])
    assert (first["names"], first["shapes"], first["flush_cache"]) == (["a", "b"], [[64], [64]], False)
    assert "weight_version" not in first
    assert (last["names"], last["flush_cache"], last["weight_version"]) == (["c", "d"], True, "3")
    assert sent == ["a", "b", "c", "d"] and engine.weight_version == 3
    sglang_server.calls.clear()
    run(main(1 << 30))  # one bucket: one call, atomic under SGLang's model-update lock, no pause
    assert sglang_server.paths() == ["/update_weights_from_distributed"]
    assert sglang_server.calls[0][2]["names"] == ["a", "b", "c", "d"]


def test_make_engine_passes_the_bucket_size_and_the_seed_flag():
    engine = make_engine(EngineConfig(kind="sglang", url="http://x:1", weight_sync_bucket_mb=3), "")
    assert engine.bucket_bytes == 3 << 20 and not engine.send_sampling_seed
    deterministic = EngineConfig(kind="sglang", url="http://x:1", args={"enable-deterministic-inference": True})
    assert make_engine(deterministic, "").send_sampling_seed
    assert make_engine(EngineConfig(kind="sglang", url="http://x:1", server="fireflash"), "").send_sampling_seed


def test_sglang_sends_the_seed_only_to_a_deterministic_server(sglang_server):
    run(SGLangEngine(sglang_server.url, send_sampling_seed=True).generate([request(seed=3)]))
    assert sglang_server.calls[-1][2]["sampling_params"]["sampling_seed"] == 3


def test_sglang_in_place_pause_with_flush_cache_is_refused():
    """io_struct.PauseGenerationReqInput: in 'in_place' mode flush_cache fails while requests are in the batch."""
    with pytest.raises(ValueError, match="in_place.*'retract'"):
        SGLangEngine("http://x:1", pause_mode="in_place")
    SGLangEngine("http://x:1", pause_mode="in_place", flush_cache=False)


def test_sglang_retry_uses_a_fresh_rid(sglang_server):
    """SGLang refuses a rid still in flight; a retry after a 5xx may find the first one there."""
    sglang_server.fail_next["/generate"] = [503]
    run(SGLangEngine(sglang_server.url, backoff_sec=0.01).generate([request(rid="r7")]))
    rids = [c[2]["rid"] for c in sglang_server.calls if c[0] == "/generate"]
    assert len(rids) == 2 and rids[0] != rids[1] and all(r.startswith("r7-") for r in rids)


@pytest.mark.parametrize("body", [{"error": {"message": "Duplicate request ID r1"}},
                                  {"success": False, "message": "Duplicate request ID r1"}], ids=["generate", "weights"])
def test_sglang_400_message_becomes_the_error(sglang_server, body):
    """http_server.py answers 400 {"error": {"message": str(e)}} (/generate) or {"success": false, "message"}
    (weight and control routes): the reason, not the dict, ends our error."""
    sglang_server.routes[("POST", "/generate")] = lambda b, q: (400, body)
    with pytest.raises(EngineRequestError, match=r"\(HTTP 400\): Duplicate request ID r1$"):
        run(SGLangEngine(sglang_server.url).generate([request()]))


def test_retries_5xx_with_backoff_then_succeeds(sglang_server):
    sglang_server.fail_next["/generate"] = [503, 502]
    (res,) = run(SGLangEngine(sglang_server.url, backoff_sec=0.01).generate([request()]))
    assert len(res.token_ids) == 6 and sglang_server.paths().count("/generate") == 3


def test_gives_up_after_max_retries(sglang_server):
    sglang_server.fail_next["/generate"] = [500, 500, 500]
    with pytest.raises(EngineHTTPError, match="after 2 attempts.*HTTP 500"):
        run(SGLangEngine(sglang_server.url, max_retries=1, backoff_sec=0.01).generate([request()]))


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block exits: nothing listens there
    with pytest.raises(EngineHTTPError, match="ConnectError"):
        run(SGLangEngine(f"http://127.0.0.1:{port}", max_retries=2, backoff_sec=0.01).generate([request()]))


def test_4xx_names_the_request_field_and_is_not_retried(sglang_server):
    engine = SGLangEngine(sglang_server.url, backoff_sec=0.01)
    bad = request()
    payload = engine._payload(bad)
    payload["sampling_params"]["max_new_tokens"] = -1

    async def main():
        return await engine.http.post("/generate", payload)

    with pytest.raises(EngineRequestError, match="HTTP 400\\): .*'max_new_tokens'\\), 'msg': 'must be >= 0'"):
        run(main())
    assert sglang_server.paths().count("/generate") == 1


def test_per_request_timeout(sglang_server):
    sglang_server.delay_sec = 1.0
    with pytest.raises(EngineTimeout, match="within 0.2 s"):
        run(SGLangEngine(sglang_server.url, timeout_sec=0.2).generate([request()]))


def test_sglang_launch_command_passes_flags_through():
    cmd = sglang_command(
        "/m",
        30001,
        {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "enable_fp8": True, "x": False},
    )
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    assert cmd[3:] == [
        "--model-path",
        "/m",
        "--host",
        "127.0.0.1",
        "--port",
        "30001",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        "3",
        "--enable-fp8",
    ]


# ───────────────────────────── vLLM ─────────────────────────────


def test_vllm_generate_uses_token_ids_and_keeps_k_best(vllm_server):
    engine = VLLMEngine(vllm_server.url)
    assert isinstance(engine, Engine)
    (res,) = run(engine.generate([request(temperature=0.9, stop_token_ids=[99])]))
    assert vllm_server.paths()[:2] == ["/v1/models", "/v1/completions"]
    body = vllm_server.calls[1][2]
    assert body["model"] == "tiny-model" and body["prompt"] == [5, 6, 7] and body["logprobs"] == 4
    assert body["return_tokens_as_token_ids"] is True and body["return_token_ids"] is True
    assert body["ignore_eos"] is True and body["max_tokens"] == 6 and body["stop_token_ids"] == [99]
    assert res.token_ids == [(18 + 7 * i) % 50 for i in range(6)]
    assert res.topk_ids[0] == [res.token_ids[0] + j for j in range(4)]  # sorted, the K+1-th dropped
    assert res.topk_logprobs[0] == sorted(res.topk_logprobs[0], reverse=True)
    assert res.finish_reason == "length" and res.n_cached_prompt_tokens == 2


def test_vllm_refuses_top_p_and_reports_max_logprobs_field(vllm_server):
    engine = VLLMEngine(vllm_server.url, model="m")
    with pytest.raises(ValueError, match="top_p"):
        run(engine.generate([request(top_p=0.9)]))
    with pytest.raises(EngineRequestError, match="field 'logprobs'"):
        run(engine.generate([request(n_top_logprobs=32)]))


def test_vllm_weight_transfer_sequence_and_pause_modes(vllm_server):
    sent = []

    async def main():
        engine = VLLMEngine(
            vllm_server.url,
            model="m",
            pause_mode="wait",
            broadcast=lambda named: sent.extend(n for n, _ in named),
        )
        await engine.init_weight_sync("10.0.0.2", 29501, world_size=3)
        await engine.pause()
        await engine.update_weights({"w": torch.zeros(3)}, version=6)
        await engine.resume()
        (res,) = await engine.generate([request()])
        return res

    res = run(main())
    assert vllm_server.paths()[:6] == [
        "/init_weight_transfer_engine",
        "/pause",
        "/start_weight_update",
        "/update_weights",
        "/finish_weight_update",
        "/resume",
    ]
    calls = {c[0]: c for c in vllm_server.calls}
    assert calls["/init_weight_transfer_engine"][2] == {
        "init_info": {"master_address": "10.0.0.2", "master_port": 29501, "rank_offset": 1, "world_size": 3}
    }
    assert calls["/pause"][1] == {"mode": "wait"}
    assert calls["/update_weights"][2]["update_info"] == {
        "names": ["w"],
        "dtype_names": ["float32"],
        "shapes": [[3]],
        "packed": False,
    }
    assert calls["/finish_weight_update"][2] == {"weight_version": "6"}
    assert sent == ["w"] and res.weight_version == 6


def test_vllm_command_adds_processed_logprobs():
    cmd = vllm_command("/m", 8001, {"weight_transfer_config": {"backend": "nccl"}, "max_logprobs": 64})
    assert "serve" in cmd and cmd[cmd.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert cmd[cmd.index("--max-logprobs") + 1] == "64"
    assert cmd[cmd.index("--weight-transfer-config") + 1] == '{"backend": "nccl"}'
    assert flags_from_args({"--already": 1}) == ["--already", "1"]


# ───────────────────────────── make_engine ─────────────────────────────


def test_make_engine_builds_each_kind(tok, tiny, sglang_server):
    from fireflash.engines.local import LocalEngine
    from fireflash.engines.scripted import ScriptedEngine

    local = make_engine(EngineConfig(kind="local", max_batch_size=2), "unused", model=tiny)
    assert isinstance(local, LocalEngine) and local.max_batch_size == 2
    run(local.close())
    assert isinstance(make_engine(EngineConfig(kind="sglang", url=sglang_server.url), "m"), SGLangEngine)
    assert isinstance(
        make_engine(EngineConfig(kind="vllm", url="http://127.0.0.1:1", served_model_name="m"), "m"),
        VLLMEngine,
    )
    assert isinstance(
        make_engine(EngineConfig(kind="scripted"), "m", tokenizer=tok, script=["hi"]), ScriptedEngine
    )
    with pytest.raises(ValueError, match="engine.url is required"):
        make_engine(EngineConfig(kind="vllm"), "m")
    with pytest.raises(ValueError, match="pause_mode"):
        make_engine(EngineConfig(kind="vllm", url="http://x", pause_mode="in_place"), "m")


# ───────────────────── weight updates: sent once, waited for, failures named ─────────────────────


def test_sglang_collective_calls_are_never_retried_and_name_the_server(sglang_server):
    """A retried receive would wait for a broadcast that already happened: one 5xx fails the update, naming it."""
    engine = SGLangEngine(sglang_server.url, max_retries=3, backoff_sec=0.01, broadcast=lambda named: None)
    sglang_server.fail_next["/init_weights_update_group"] = [502]
    with pytest.raises(WeightSyncFailed, match="joining the weight-update group") as joining:
        run(engine.init_weight_sync("10.0.0.1", 29500, world_size=2))
    assert joining.value.url == sglang_server.url and joining.value.call == "/init_weights_update_group"
    assert sglang_server.paths().count("/init_weights_update_group") == 1
    run(engine.init_weight_sync("10.0.0.1", 29500, world_size=2))

    sglang_server.fail_next["/update_weights_from_distributed"] = [500]
    with pytest.raises(WeightSyncFailed) as failed:
        run(engine.update_weights({"w": torch.zeros(2)}, version=3))
    message = str(failed.value)
    assert sglang_server.url in message and "/update_weights_from_distributed" in message
    assert "weight version 3" in message and " failed: " in message and "HTTP 500" in message
    assert (failed.value.version, failed.value.timed_out) == (3, False)
    assert sglang_server.paths().count("/update_weights_from_distributed") == 1 and engine.weight_version == 0


def test_sglang_update_timeout_is_reported_as_a_timeout():
    def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer", request=req)

    engine = SGLangEngine("http://sglang.test:30000", transport=httpx.MockTransport(handler))
    with pytest.raises(WeightSyncFailed, match=r"http://sglang.test:30000: /update_weights_from_distributed "
                       r"\(weight version 4\) timed out") as e:
        run(engine.receive_broadcast([], version=4))
    assert e.value.timed_out


def test_sglang_trainer_broadcast_failure_names_the_server_and_version(sglang_server):
    def broadcast(named):
        raise RuntimeError("gloo: Connection closed by peer")

    engine = SGLangEngine(sglang_server.url, broadcast=broadcast)
    with pytest.raises(WeightSyncFailed, match=r"trainer broadcast \(weight version 2\) failed: RuntimeError: gloo"):
        run(engine.update_weights({"w": torch.zeros(2)}, version=2))


def test_weight_update_waits_longer_than_a_turn(sglang_server):
    """The engine ``fireflash train`` builds (local backend) gives an update weight_sync_timeout_sec + 60 s, not
    the per-turn request timeout: SGLang installs it only once its running turns have finished."""
    cfg = EngineConfig(kind="sglang", url=sglang_server.url, request_timeout_sec=0.2, weight_sync_timeout_sec=5)
    engine = make_engine(cfg, "m", broadcast=lambda named: None)
    sglang_server.delay_sec = 0.5  # longer than a turn may take, well within the update's time

    async def main():
        await engine.init_weight_sync("10.0.0.1", 29500, world_size=2)
        await engine.update_weights({"w": torch.zeros(2)}, version=1)
        await engine.update_weights(Path("/ckpt/v2"), version=2)

    run(main())
    assert engine.weight_version == 2 and engine.update_timeout_sec == 65


def test_vllm_collective_calls_are_never_retried(vllm_server):
    engine = VLLMEngine(vllm_server.url, model="m", max_retries=3, backoff_sec=0.01)
    vllm_server.fail_next["/update_weights"] = [503]
    with pytest.raises(EngineHTTPError, match="after 1 attempts"):
        run(engine.receive_broadcast([], version=1))
    assert vllm_server.paths().count("/update_weights") == 1


# ───────────────────── the weight version of a result comes from the server ─────────────────────


def _sglang_answering(version_field: dict) -> httpx.MockTransport:
    """An SGLang /generate that samples [3, 4] and reports ``version_field`` in meta_info."""

    def handler(req: httpx.Request) -> httpx.Response:
        meta = {"finish_reason": {"type": "length"}, "output_token_logprobs": [[-0.5, 3, None], [-0.7, 4, None]],
                "output_top_logprobs": [[], []], **version_field}
        return httpx.Response(200, json={"output_ids": [3, 4], "meta_info": meta})

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("field", [{}, {"weight_version": None}, {"weight_version": "v7"}, {"weight_version": ""},
                                   {"weight_version": "-1"}, {"weight_version": -2}],
                         ids=["absent", "null", "v7", "empty", "negative-str", "negative-int"])
def test_sglang_result_without_a_weight_version_is_an_error(field):
    """Never the client's version at submit (on the Ray server path always 0, so every turn would turn stale)."""
    engine = SGLangEngine("http://sglang.test:30000", transport=_sglang_answering(field))
    with pytest.raises(WeightVersionMissing, match=r"SGLang server http://sglang.test:30000: .*'r1'.* "
                       r"meta_info.weight_version = "):
        run(engine.generate([request()]))


@pytest.mark.parametrize("meta", [
    {"output_ids": [3, 4, 5]},
    {"output_top_logprobs": [[[-0.5, 3, None]]]},
], ids=["ids", "top-k"])
def test_sglang_result_with_unequal_lengths_costs_a_try(meta):
    """Speculative decoding v2 returns broken log-probs: output ids, log-probs and top-k must line up."""

    def handler(_req):
        base = {"finish_reason": {"type": "length"}, "weight_version": "0",
                "output_token_logprobs": [[-0.5, 3, None], [-0.7, 4, None]], "output_top_logprobs": [[], []]}
        base |= {k: v for k, v in meta.items() if k != "output_ids"}
        return httpx.Response(200, json={"output_ids": meta.get("output_ids", [3, 4]), "meta_info": base})

    engine = SGLangEngine("http://sglang.test:30000", transport=httpx.MockTransport(handler))
    with pytest.raises(EngineHTTPError, match=r"'r1' has \d output_ids, 2 output_token_logprobs and \d "
                       "output_top_logprobs rows"):
        run(engine.generate([request()]))


@pytest.mark.parametrize("spans,expected", [
    ([{"version": "4", "start": 0, "end": 1}, {"version": "5", "start": 1, "end": 2}], 4),
    (["6", "5"], 5),
    ([{"version": "default", "start": 0, "end": 2}], 3),
])
def test_sglang_result_spanning_versions_carries_the_oldest(spans, expected):
    """A turn paused with 'retract' / 'in_place' resumes on new weights; meta_info.weight_versions has the spans,
    and staleness counts from the oldest (its first tokens are that far behind the trainer)."""
    engine = SGLangEngine("http://sglang.test:30000", weight_version=3,
                          transport=_sglang_answering({"weight_version": "9", "weight_versions": spans}))
    (res,) = run(engine.generate([request()]))
    assert res.weight_version == expected


def test_training_refuses_quantization_and_warns_about_draft_models():
    from fireflash.engines.sglang_launch import check_sglang_training

    with pytest.raises(ValueError, match=r"engine.args.quantization = 'fp8' .*remove engine.args.quantization"):
        check_sglang_training({"quantization": "fp8"}, "collective")
    (warning,) = check_sglang_training({"speculative-algorithm": "NEXTN", "tp-size": 8}, "collective")
    assert "draft" in warning and "NEXTN" in warning
    assert check_sglang_training({"tp_size": 8}, "disk") == []


def test_cluster_config_passes_the_training_checks():
    from fireflash.config import ConfigError, load_config
    from fireflash.cli.train import check_train_config

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "configs" / "cluster.toml")
    check_train_config(cfg)
    fp8 = load_config(root / "configs" / "cluster.toml", ["engine.args.quantization=fp8"])
    with pytest.raises(ConfigError, match="quantization"):
        check_train_config(fp8)


@pytest.mark.parametrize("reported,expected", [("7", 7), (5, 5), ("default", 3)])
def test_sglang_result_carries_the_reported_weight_version(reported, expected):
    """The server's version, whatever the client last installed; 'default' (no versioned update yet) is the
    version the server was launched with."""
    engine = SGLangEngine("http://sglang.test:30000", weight_version=3,
                          transport=_sglang_answering({"weight_version": reported}))
    (res,) = run(engine.generate([request()]))
    assert res.weight_version == expected and res.token_ids == [3, 4]


def test_vllm_result_spanning_an_update_is_an_error():
    """vLLM reports no version: a result is tagged with the client's, unless an update went through meanwhile."""
    updated = asyncio.Event()

    async def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/completions":
            await updated.wait()
            lp = {"tokens": ["token_id:3"], "token_logprobs": [-0.5], "top_logprobs": [{"token_id:3": -0.5}]}
            return httpx.Response(200, json={"choices": [{"token_ids": [3], "finish_reason": "length", "logprobs": lp}]})
        return httpx.Response(200, json={})

    engine = VLLMEngine("http://vllm.test:8000", model="m", transport=httpx.MockTransport(handler))

    async def main():
        sampling = asyncio.ensure_future(engine.generate([request()]))
        await asyncio.sleep(0.05)
        await engine.receive_broadcast([], version=1)
        updated.set()
        with pytest.raises(WeightVersionMissing, match=r"vLLM server http://vllm.test:8000 .*'r1'.*version 1"):
            await sampling
        return await engine.generate([request()])

    (res,) = run(main())
    assert res.weight_version == 1
