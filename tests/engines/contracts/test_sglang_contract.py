"""SGLangEngine's requests and FireFlash's stand-in server's responses, pinned to recorded SGLang examples.

The examples (``sglang_0.5/*.json``, see its README) are written from SGLang's own code; each names the file it
imitates. A client request must equal the example's; a stand-in response must have every field of the example's,
with the same JSON types; the client must read the example's response as ``parsed`` says.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from fireflash.engines.http import EngineRequestError
from fireflash.engines.scripted import ScriptedEngine
from fireflash.engines.serve import EngineServer
from fireflash.engines.sglang import SGLangEngine
from fireflash.engines.weights import TensorSpec
from fireflash.protocols import GenerateRequest, SamplingParams

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).parent / "sglang_0.5"
GENERATE = sorted(p.name for p in EXAMPLES.glob("generate_*.json"))


def example(name: str) -> dict:
    return json.loads((EXAMPLES / name).read_text())


def _request(body: dict) -> GenerateRequest:
    sp = body["sampling_params"]
    params = SamplingParams(temperature=sp["temperature"], top_p=sp["top_p"], max_new_tokens=sp["max_new_tokens"],
                            stop_token_ids=sp["stop_token_ids"], n_top_logprobs=body["top_logprobs_num"], seed=11)
    return GenerateRequest(request_id=body["rid"], prompt_ids=body["input_ids"], params=params)


def _answering(status: int, response: dict, seen: list):
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content or b"{}")))
        return httpx.Response(status, json=response)

    return httpx.MockTransport(handler)


def _same_shape(got, want, where="response") -> None:
    """Every field of ``want`` is in ``got`` with the same JSON type (lists: their first items compared)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not an object"
        for key, value in want.items():
            assert key in got, f"{where}.{key} missing"
            _same_shape(got[key], value, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list), f"{where}: {got!r} is not a list"
        if want and got:
            _same_shape(got[0], want[0], f"{where}[0]")
    elif want is not None:
        kind = (int, float) if isinstance(want, float) else type(want)
        assert isinstance(got, kind) and not (isinstance(got, bool) and kind is not bool), f"{where}: {got!r}"


@pytest.mark.parametrize("name", GENERATE)
def test_client_sends_the_recorded_generate_request_and_reads_the_response(name):
    ex = example(name)
    seen = []
    engine = SGLangEngine("http://sglang.test:30000", transport=_answering(ex.get("status", 200), ex["response"], seen))
    if "error_ends_with" in ex:
        with pytest.raises(EngineRequestError) as e:
            asyncio.run(engine.generate([_request(ex["request"])]))
        assert str(e.value).endswith(ex["error_ends_with"])
    else:
        (res,) = asyncio.run(engine.generate([_request(ex["request"])]))
        for field, value in ex["parsed"].items():
            assert getattr(res, field) == value, field
    (path, body), = seen
    assert path == "/generate" and body.pop("rid").startswith(ex["request"]["rid"] + "-")  # fresh per try
    assert body == {k: v for k, v in ex["request"].items() if k != "rid"}


@pytest.mark.parametrize("name", ["generate_stop.json", "generate_length.json"])
def test_stand_in_answers_a_recorded_generate_in_sglangs_shape(tok, name):
    ex = example(name)
    with_stop = ex["response"]["meta_info"]["finish_reason"]["type"] == "stop"
    script = ["hi" if with_stop else "a turn much longer than four tokens, cut at max_new_tokens"]
    server = EngineServer(ScriptedEngine(tok, script))
    server.start()
    try:
        answer = httpx.post(server.url + "/generate", json=ex["request"], timeout=30)
    finally:
        server.close()
    assert answer.status_code == 200, answer.text
    _same_shape(answer.json(), ex["response"])
    assert answer.json()["meta_info"]["finish_reason"]["type"] == ex["response"]["meta_info"]["finish_reason"]["type"]


def test_stand_in_aborts_in_sglangs_shape(tok):
    """A request in flight when /pause_generation {mode: abort} arrives answers as generate_abort.json."""
    ex = example("generate_abort.json")

    class Slow(ScriptedEngine):
        async def generate(self, requests):
            await asyncio.sleep(60)

    server = EngineServer(Slow(tok))
    server.start()

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            running = asyncio.ensure_future(client.post("/generate", json=ex["request"]))
            await asyncio.sleep(0.3)
            await client.post("/pause_generation", json={"mode": "abort"})
            return await running

    try:
        answer = asyncio.run(main())
    finally:
        server.close()
    _same_shape(answer.json(), ex["response"])
    assert answer.json()["meta_info"]["finish_reason"]["type"] == "abort"


def test_client_sends_the_recorded_weight_update_calls():
    ex = example("update_weights_from_distributed.json")
    seen = []
    engine = SGLangEngine("http://sglang.test:30000", pause_mode="retract", bucket_bytes=ex["bucket_bytes"],
                          transport=_answering(200, ex["response"], seen))
    specs = [TensorSpec(name, dtype, tuple(shape)) for name, dtype, shape in ex["tensors"]]
    asyncio.run(engine.receive_broadcast(specs, version=7))
    assert [list(call) for call in seen] == ex["calls"]


def test_client_sends_the_recorded_group_init():
    ex = example("init_weights_update_group.json")
    seen = []
    engine = SGLangEngine("http://sglang.test:30000", transport=_answering(200, ex["response"], seen))
    r = ex["request"]
    asyncio.run(engine.init_weight_sync(r["master_address"], r["master_port"], r["world_size"], r["rank_offset"]))
    assert seen == [("/init_weights_update_group", r)]


def test_stand_in_accepts_the_recorded_weight_calls_field_by_field():
    """The stand-in's request models take every field the recorded calls send (no 400 for an unknown field)."""
    from fireflash.engines.serve_bodies import _DistributedUpdate, _InitGroup, _Pause

    for path, body in example("update_weights_from_distributed.json")["calls"]:
        if path == "/update_weights_from_distributed":
            _DistributedUpdate.model_validate(body)
        elif path == "/pause_generation":
            _Pause.model_validate(body)
    _InitGroup.model_validate(example("init_weights_update_group.json")["request"])


def test_client_reads_sglangs_validation_error_body():
    """SGLang answers a body it cannot validate with its ``ErrorResponse`` at the top level (error_bad_body.json)."""
    ex = example("error_bad_body.json")
    engine = SGLangEngine("http://sglang.test:30000", transport=_answering(ex["status"], ex["response"], []))
    request = GenerateRequest(request_id="r", prompt_ids=[5, 9], params=SamplingParams(max_new_tokens=4))
    with pytest.raises(EngineRequestError) as e:
        asyncio.run(engine.generate([request]))
    assert str(e.value).endswith(ex["error_ends_with"])


def test_stand_in_answers_errors_in_sglangs_shapes(tok):
    """Issue 31: the stand-in answered both with FastAPI's ``{"detail": [...]}``; SGLang answers a body that fails
    validation with error_bad_body.json's shape and a request its engine refuses with generate_error.json's."""
    bad_body, refused = example("error_bad_body.json"), example("generate_error.json")
    request = refused["request"]

    class Refusing(ScriptedEngine):  # an engine that refuses a request (LocalEngine: ids outside the vocabulary...)
        async def generate(self, requests):
            if requests[0].prompt_ids[-1] == 10**6:
                raise ValueError(refused["response"]["error"]["message"])
            return await super().generate(requests)

    server = EngineServer(Refusing(tok, ["hi"]))
    server.start()
    try:
        too_few = {**request, "sampling_params": {**request["sampling_params"], "max_new_tokens": -1}}
        invalid = httpx.post(server.url + "/generate", json=too_few, timeout=30)
        bad_mode = httpx.post(server.url + "/pause_generation", json={"mode": "later"}, timeout=30)
        unknown_id = httpx.post(server.url + "/generate", json={**request, "input_ids": [5, 10**6]}, timeout=30)
    finally:
        server.close()
    for answer in (invalid, bad_mode):
        assert answer.status_code == bad_body["status"], answer.text
        assert set(answer.json()) == set(bad_body["response"])
        _same_shape(answer.json(), bad_body["response"])
    assert invalid.json()["param"] == "sampling_params.max_new_tokens"
    assert invalid.json()["message"] == bad_body["response"]["message"]
    assert unknown_id.status_code == refused["status"], unknown_id.text
    assert unknown_id.json() == refused["response"]
