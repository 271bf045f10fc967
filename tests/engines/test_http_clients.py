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
from fireflash.engines.sglang import SGLangEngine, sglang_command
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
    assert body["input_ids"] == [5, 6, 7] and body["rid"] == "r1"
    assert (
        body["return_logprob"] is True and body["top_logprobs_num"] == 4 and body["logprob_start_len"] == -1
    )
    sp = body["sampling_params"]
    assert (sp["temperature"], sp["max_new_tokens"], sp["stop_token_ids"], sp["sampling_seed"]) == (
        0.7,
        6,
        [99],
        3,
    )
    assert sp["ignore_eos"] is True and sp["no_stop_trim"] is True
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

    with pytest.raises(EngineRequestError, match="field 'sampling_params.max_new_tokens'"):
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
