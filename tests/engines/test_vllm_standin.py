"""vLLM drives training (issue 31): ``VLLMEngine`` + the trainer's ``VLLMTrainerTransfer`` against the vLLM-faithful
stand-in (``engines/vllm_serve.py``), on the local backend's seam (``connect_local_trainer``), as
tests/runtime/test_servers_local.py does for SGLang.

Server and trainer share this process: vLLM's stateless group registers nothing in torch's default world, so both
ends of the gloo stand-in group fit in one process (no ~20 s server launch).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import torch

from fireflash.engines.http import EngineHTTPError, WeightVersionMissing
from fireflash.engines.local import LocalEngine
from fireflash.engines.vllm import VLLMEngine
from fireflash.engines.vllm_serve import generation_defaults, vllm_standin
from fireflash.models import build_tiny_model
from fireflash.protocols import GenerateRequest, SamplingParams
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.local_server import connect_local_trainer
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer

VOCAB = 97
PROMPT = [5, 9, 13, 2, 7, 11]
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6, n_top_logprobs=4, seed=3)


def _teacher_logprobs(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + tokens[:-1]])
    with torch.no_grad():
        logq = torch.log_softmax(model(ids).logits[0, len(prompt) - 1 :].float(), -1)
    return logq.gather(1, torch.tensor(tokens)[:, None])[:, 0]


@pytest.fixture
def standin(request):
    """A stand-in over a tiny LocalEngine; ``request.param`` holds ``build_vllm_app`` arguments."""
    args = {"weight_transfer_config": {"backend": "gloo"}, "enable_prompt_tokens_details": True,
            "served_model_name": "tiny", "weight_sync_timeout_sec": 30, **getattr(request, "param", {})}
    server = vllm_standin(LocalEngine(build_tiny_model(VOCAB, seed=0), max_batch_size=4, num_threads=1), **args)
    server.start()
    yield server
    server.close()


def test_trainer_weights_reach_the_vllm_server_after_each_update(standin):
    """The training seam: connect → the trainer's weights → two updates; every result carries the version that
    sampled it and matches the trainer's own log-probs."""
    trainer_model = build_tiny_model(VOCAB, seed=7)  # not the server's weights: the first push must replace them
    trainer = Trainer(trainer_model, None, TrainerConfig(), ObjectiveConfig(), temperature=1.0)

    async def run():
        client = VLLMEngine(standin.url, transfer_backend="gloo", max_retries=0)
        engine = await connect_local_trainer(client, trainer, "collective", standin.url, 20)
        request = GenerateRequest(request_id="r", prompt_ids=PROMPT, params=PARAMS)
        (before,) = await engine.generate([request])
        rows = [(before, _teacher_logprobs(trainer_model, PROMPT, before.token_ids), await engine.server_weight_version())]
        for version in (1, 2):
            with torch.no_grad():  # a different model each time, as after an optimizer step
                for p in trainer_model.parameters():
                    p.mul_(0.9)
            await engine.update_weights(trainer.state_dict(), version)
            (res,) = await engine.generate([request])
            rows.append((res, _teacher_logprobs(trainer_model, PROMPT, res.token_ids), await engine.server_weight_version()))
        paused = (await engine.http.get("/is_paused"))["is_paused"]
        await engine.close()
        return rows, paused

    rows, paused = asyncio.run(run())
    assert [(r.weight_version, v) for r, _, v in rows] == [(0, "0"), (1, "1"), (2, "2")]
    for res, teacher, _ in rows:
        torch.testing.assert_close(torch.tensor(res.logprobs), teacher, atol=1e-5, rtol=0)
    assert rows[1][0].logprobs != rows[2][0].logprobs
    assert not paused  # each update paused and resumed the server (vLLM's pause-only RL sequence)


@pytest.mark.parametrize("standin", [{"default_sampling_params": {"top_k": 20, "min_p": 0.05,
                                                                   "repetition_penalty": 1.1}}], indirect=True)
def test_generation_config_defaults_cannot_truncate_sampling(standin):
    """A model whose generation_config.json sets top_k / min_p / repetition_penalty: vLLM applies them to any request
    that omits the fields, so the client sends the neutral values (the stand-in refuses a non-neutral effective one)."""
    client = VLLMEngine(standin.url)
    (res,) = asyncio.run(client.generate([GenerateRequest(request_id="g", prompt_ids=PROMPT, params=PARAMS)]))
    assert len(res.token_ids) == 6
    # what the server does with a request that omits them (the client before issue 31)
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 2, "logprobs": 1, "return_tokens_as_token_ids": True}
    answer = httpx.post(f"{standin.url}/v1/completions", json=body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] in ("top_k", "min_p", "repetition_penalty")
    assert "generation_config.json" in answer.json()["error"]["message"]


def test_generation_defaults_read_like_vllm(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"top_k": 20, "temperature": 0.7, "max_new_tokens": 64, "do_sample": True, "eos_token_id": [2, 7]}))
    assert generation_defaults(tmp_path) == ({"top_k": 20, "temperature": 0.7, "max_tokens": 64}, [2, 7])
    assert generation_defaults(tmp_path / "missing") == ({}, [])


def _complete(url: str, **fields):
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 12, "temperature": 1.0, "top_k": 0, "min_p": 0.0,
            "repetition_penalty": 1.0, "logprobs": 2, "return_tokens_as_token_ids": True, "return_token_ids": True,
            "seed": 1, "request_id": "same", **fields}
    return httpx.post(f"{url}/v1/completions", json=body).json()


def test_stop_token_ids_stop_even_with_ignore_eos(standin):
    """vLLM's check_stop: stop_token_ids always stop; ignore_eos only removes EOS from the stop set."""
    free = _complete(standin.url, ignore_eos=True)["choices"][0]
    stop_at = free["token_ids"][3]
    first = free["token_ids"].index(stop_at)
    for ignore_eos in (True, False):
        choice = _complete(standin.url, ignore_eos=ignore_eos, stop_token_ids=[stop_at])["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop_at
        assert choice["token_ids"] == free["token_ids"][: first + 1]  # the stop token is returned
        top = choice["logprobs"]["top_logprobs"][0]
        assert f"token_id:{choice['token_ids'][0]}" in top and len(top) in (2, 3)  # K best + the sampled one


def test_eos_stops_unless_ignore_eos(standin):
    """EOS (the model's and generation_config.json's) stops only without ignore_eos, with stop_reason null."""
    free = _complete(standin.url, ignore_eos=True)["choices"][0]
    eos = free["token_ids"][2]
    first = free["token_ids"].index(eos)
    server = vllm_standin(LocalEngine(build_tiny_model(VOCAB, seed=0), max_batch_size=4, num_threads=1),
                          served_model_name="tiny", eos_token_ids=[eos])  # the same model, its EOS a token it samples
    try:
        server.start()
        ignored = _complete(server.url, ignore_eos=True)["choices"][0]
        stopped = _complete(server.url, ignore_eos=False)["choices"][0]
    finally:
        server.close()
    assert ignored["token_ids"] == free["token_ids"] and ignored["finish_reason"] == "length"
    assert stopped["token_ids"] == free["token_ids"][: first + 1]
    assert stopped["finish_reason"] == "stop" and stopped["stop_reason"] is None


def test_weight_routes_follow_vllms_state_machine(standin):
    url = standin.url
    assert httpx.post(f"{url}/update_weights", json={"update_info": {"names": []}}).status_code == 409
    assert httpx.post(f"{url}/finish_weight_update", json={"weight_version": "1"}).status_code == 409
    assert httpx.post(f"{url}/init_weight_transfer_engine", json={}).json() == {
        "detail": "Missing 'init_info' in request body"}
    assert httpx.post(f"{url}/start_weight_update").status_code == 200
    assert httpx.post(f"{url}/start_weight_update").status_code == 409
    assert httpx.get(f"{url}/weight_info").json() == {"weight_version": None}


@pytest.mark.parametrize("standin", [{"weight_transfer_config": None}], indirect=True)
def test_without_weight_transfer_config_every_weight_route_fails(standin):
    client = VLLMEngine(standin.url, transfer_backend="gloo", max_retries=0)
    with pytest.raises(EngineHTTPError, match="not configured"):
        asyncio.run(client.init_weight_sync("127.0.0.1", 1, world_size=2))


def test_pause_abort_returns_the_request_in_flight(standin):
    async def run():
        client = VLLMEngine(standin.url, pause_mode="abort")
        long = GenerateRequest(request_id="long", prompt_ids=PROMPT,
                               params=SamplingParams(max_new_tokens=4000, n_top_logprobs=0, seed=1))
        task = asyncio.ensure_future(client.generate([long]))
        await asyncio.sleep(0.5)
        await client.pause()
        (res,) = await task
        await client.resume()
        await client.close()
        return res

    res = asyncio.run(run())
    assert res.finish_reason == "abort" and 0 < len(res.token_ids) < 4000


def test_an_update_lets_running_turns_finish_on_the_old_weights(standin):
    """The client's own pause before an update is 'wait' (whatever pause_mode says): a turn in flight is not aborted
    (the harness would end its attempt) and keeps the version that sampled it."""
    trainer = Trainer(build_tiny_model(VOCAB, seed=7), None, TrainerConfig(), ObjectiveConfig(), temperature=1.0)

    async def run():
        engine = await connect_local_trainer(VLLMEngine(standin.url, transfer_backend="gloo", pause_mode="abort"),
                                             trainer, "collective", standin.url, 20)
        long = GenerateRequest(request_id="long", prompt_ids=PROMPT,
                               params=SamplingParams(max_new_tokens=120, n_top_logprobs=0, seed=1))
        running = asyncio.ensure_future(engine.generate([long]))
        await asyncio.sleep(0.3)
        await engine.update_weights(trainer.state_dict(), 1)
        (res,) = await running
        await engine.close()
        return res

    res = asyncio.run(run())
    assert res.finish_reason == "length" and len(res.token_ids) == 120 and res.weight_version == 0


def test_a_sampling_client_labels_results_with_the_servers_version(standin):
    """The Ray backend's seam (issue 31): the driver's client updates the server, a rollout worker's client samples; the
    sampler reads the version at ``/weight_info`` before each request, the oldest its tokens can come from. On the old
    client every result said 0 (the version the sampling client itself had installed: none)."""
    trainer = Trainer(build_tiny_model(VOCAB, seed=7), None, TrainerConfig(), ObjectiveConfig(), temperature=1.0)
    request = GenerateRequest(request_id="r", prompt_ids=PROMPT, params=PARAMS)

    async def run():
        sampler = VLLMEngine(standin.url, max_retries=0, versions_from_server=True)
        with pytest.raises(WeightVersionMissing, match="reports weight_version None"):  # nothing pushed yet
            await sampler.generate([request])
        driver = await connect_local_trainer(VLLMEngine(standin.url, transfer_backend="gloo"), trainer, "collective",
                                             standin.url, 20)
        seen = [(await sampler.generate([request]))[0].weight_version]
        await driver.update_weights(trainer.state_dict(), 5)
        seen.append((await sampler.generate([request]))[0].weight_version)
        await asyncio.gather(sampler.close(), driver.close())
        return seen

    assert asyncio.run(run()) == [0, 5]


@pytest.mark.parametrize("standin", [{"weight_sync_timeout_sec": 3}], indirect=True)
def test_a_failed_transfer_is_finished_and_the_next_update_goes_through(standin):
    """A member that dies mid-transfer leaves the others' ``/update_weights`` failing; vLLM's state machine then answers
    every ``/start_weight_update`` with 409 until the update is finished. The client finishes it (no version) and keeps
    the server paused (its weights may be half new) until the next update succeeds. On the old client the retry got
    409 and the server was resumed on whatever had arrived."""
    trainer = Trainer(build_tiny_model(VOCAB, seed=7), None, TrainerConfig(), ObjectiveConfig(), temperature=1.0)

    async def run():
        engine = await connect_local_trainer(VLLMEngine(standin.url, transfer_backend="gloo", max_retries=0), trainer,
                                             "collective", standin.url, 20)
        # the server waits for a broadcast nobody sends (a member died): its receive fails after 3 s
        with pytest.raises(EngineHTTPError, match="update_weights"):
            await engine.receive_broadcast([("model.embed_tokens.weight", "float32", (VOCAB, 3))], 7)
        paused_after_failure = (await engine.http.get("/is_paused"))["is_paused"]
        version_after_failure = await engine.server_weight_version()
        engine = await connect_local_trainer(engine, trainer, "collective", standin.url, 20)  # a new group, as Ray's
        await engine.update_weights(trainer.state_dict(), 8)
        state = ((await engine.http.get("/is_paused"))["is_paused"], await engine.server_weight_version())
        await engine.close()
        return paused_after_failure, version_after_failure, state

    paused_after_failure, version_after_failure, state = asyncio.run(run())
    assert paused_after_failure and version_after_failure == "0"
    assert state == (False, "8")
