"""``VLLMEngine``'s requests and parsing, and the stand-in's answers, pinned to vLLM 0.33's shapes (issue 31).

The fixtures in contracts/vllm_0.33/ are written from vLLM's own code (each names the files); a change on either
side shows up here rather than on a GPU.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import torch

from fireflash.engines.local import LocalEngine
from fireflash.engines.vllm import VLLMEngine, vllm_command
from fireflash.engines.vllm_serve import OPENAI_DEFAULTS, vllm_standin
from fireflash.models import build_tiny_model
from fireflash.protocols import GenerateRequest, SamplingParams

CONTRACT = Path(__file__).parent / "contracts" / "vllm_0.33"
COMPLETIONS = json.loads((CONTRACT / "completions.json").read_text())
RLHF = json.loads((CONTRACT / "rlhf_weight_transfer.json").read_text())


def _recording(answers: dict[str, dict]) -> tuple[httpx.MockTransport, list[tuple[str, str, dict, object]]]:
    calls: list[tuple[str, str, dict, object]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content) if req.content else None
        calls.append((req.method, req.url.path, dict(req.url.params), body))
        return httpx.Response(200, json=answers.get(req.url.path, {}))

    return httpx.MockTransport(handler), calls


def _request() -> GenerateRequest:
    r = COMPLETIONS["request"]
    params = SamplingParams(temperature=r["temperature"], max_new_tokens=r["max_tokens"], n_top_logprobs=r["logprobs"],
                            stop_token_ids=r["stop_token_ids"], seed=r["seed"])
    return GenerateRequest(request_id=r["request_id"], prompt_ids=r["prompt"], params=params)


def test_the_completion_request_is_vllms():
    transport, calls = _recording({"/v1/completions": COMPLETIONS["response"]})
    engine = VLLMEngine("http://vllm.test", model="tiny-model", transport=transport)
    (res,) = asyncio.run(engine.generate([_request()]))
    sent = calls[0][3]
    assert sent == COMPLETIONS["request"]
    assert set(sent) <= set(COMPLETIONS["request_fields"])  # every field is one CompletionRequest has
    # every field vLLM would take from generation_config.json is sent explicitly
    assert set(COMPLETIONS["server_defaulted_fields"]) - {"_about"} <= set(sent)
    assert set(OPENAI_DEFAULTS) == set(COMPLETIONS["server_defaulted_fields"]) - {"_about"}  # the stand-in's copy
    parsed = COMPLETIONS["parsed"]
    assert {k: getattr(res, k) for k in parsed} == parsed


def test_a_logprobs_error_names_the_field():
    err = COMPLETIONS["error_logprobs_over_max"]

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(err["status"], json=err["body"])

    engine = VLLMEngine("http://vllm.test", model="m", transport=httpx.MockTransport(handler))
    with pytest.raises(Exception, match="field 'logprobs'"):
        asyncio.run(engine.generate([_request()]))


@pytest.mark.parametrize("name", ["missing_init_info", "logprobs_over_max"])
def test_the_client_surfaces_the_message_of_either_vllm_error_body(name):
    """vLLM's OpenAI routes answer ``{"error": {"message"}}``, its RL routes FastAPI's ``{"detail": "..."}`` (issue 31):
    the client's error ends with the server's message either way (it printed the whole ``detail`` dict before)."""
    err = (RLHF["errors"]["missing_init_info"] if name == "missing_init_info"
           else COMPLETIONS["error_logprobs_over_max"])
    message = err["body"]["detail"] if "detail" in err["body"] else err["body"]["error"]["message"]
    engine = VLLMEngine("http://vllm.test", model="m", max_retries=0, transport=httpx.MockTransport(
        lambda _: httpx.Response(err["status"], json=err["body"])))
    call = engine.init_weight_sync("10.0.0.2", 29501, 2) if name == "missing_init_info" else engine.generate([_request()])
    with pytest.raises(Exception) as e:
        asyncio.run(call)
    assert str(e.value).endswith(f"(HTTP {err['status']}): {message}")


def test_a_weight_update_is_vllms_pause_only_sequence():
    answers = {step["path"]: step["response"] for step in RLHF["sequence"]}
    transport, calls = _recording(answers)
    sent: list[str] = []
    engine = VLLMEngine("http://vllm.test", model="m", transport=transport, broadcast=lambda n: sent.extend(x for x, _ in n))
    init = RLHF["sequence"][0]["body"]["init_info"]

    async def run():
        await engine.init_weight_sync(init["master_address"], init["master_port"], init["world_size"], init["rank_offset"])
        await engine.update_weights({"w": torch.zeros(2, 3), "b": torch.zeros(3, dtype=torch.bfloat16)}, 6)

    asyncio.run(run())
    assert [(m, p) for m, p, _, _ in calls] == [(s["method"], s["path"]) for s in RLHF["sequence"]]
    for (_, _, query, body), step in zip(calls, RLHF["sequence"], strict=True):
        assert query == step["query"]
        if step["body"] != "any":
            assert body == step["body"], step["path"]
    assert sent == ["w", "b"] and engine.weight_version == 6


def test_the_launcher_sets_every_flag_the_client_needs():
    cmd = vllm_command("/m", 8000)
    for flag, value in RLHF["launch_flags"].items():
        if flag.startswith("--"):
            assert flag in cmd, flag
            if value is not True:
                assert cmd[cmd.index(flag) + 1] == value, flag


@pytest.fixture(scope="module")
def standin():
    server = vllm_standin(LocalEngine(build_tiny_model(97, seed=0), max_batch_size=2, num_threads=1),
                          served_model_name="tiny-model", weight_transfer_config={"backend": "gloo"},
                          enable_prompt_tokens_details=True)
    server.start()
    yield server.url
    server.close()


def test_the_standins_completion_has_vllms_shape(standin):
    body = {**COMPLETIONS["request"], "stop_token_ids": []}
    got = httpx.post(f"{standin}/v1/completions", json=body).json()
    want = COMPLETIONS["response"]
    assert set(got) <= set(want) and set(got["choices"][0]) <= set(want["choices"][0])
    assert set(got["choices"][0]["logprobs"]) == set(want["choices"][0]["logprobs"])
    assert set(got["usage"]) == set(want["usage"])
    too_many = httpx.post(f"{standin}/v1/completions", json={**body, "logprobs": 40})
    assert too_many.status_code == 400 and too_many.json() == COMPLETIONS["error_logprobs_over_max"]["body"]


def test_the_standins_rl_routes_have_vllms_shape(standin):
    errors = RLHF["errors"]
    assert httpx.get(f"{standin}/weight_info").json() == RLHF["weight_info"]["before_any_update"]
    assert httpx.get(f"{standin}/is_paused").json() == RLHF["is_paused"]
    for name, path, body in (("missing_init_info", "/init_weight_transfer_engine", {}),
                             ("missing_update_info", "/update_weights", {}),
                             ("update_without_start", "/update_weights", {"update_info": {}}),
                             ("finish_without_start", "/finish_weight_update", {})):
        answer = httpx.post(f"{standin}{path}", json=body)
        assert answer.status_code == errors[name]["status"], name
        if "body" in errors[name]:
            assert answer.json() == errors[name]["body"]
    for step in RLHF["sequence"][1:3]:
        assert httpx.post(f"{standin}{step['path']}", params=step["query"]).json() == step["response"]
    assert httpx.post(f"{standin}/start_weight_update").status_code == errors["second_start"]["status"]
    assert httpx.post(f"{standin}/finish_weight_update", json={"weight_version": "6"}).json() == \
        RLHF["sequence"][4]["response"]
    assert httpx.post(f"{standin}/resume").json() == RLHF["sequence"][5]["response"]
    assert httpx.get(f"{standin}/weight_info").json() == RLHF["weight_info"]["after"]
