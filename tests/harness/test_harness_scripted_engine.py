"""The scripted engine: token-exact replay, a proper top-K distribution, tiny-model sampling, versions."""

import asyncio
import math

import pytest

from fireflash.engines.scripted import ScriptedEngine, ScriptExhausted
from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.protocols import Engine, GenerateRequest, SamplingParams

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def req(rid, prompt, **params):
    return GenerateRequest(request_id=rid, prompt_ids=prompt, params=SamplingParams(stop_token_ids=[2], **params))


def test_replays_texts_token_exactly_with_stop(tok):
    engine = ScriptedEngine(tok, ["echo hello", "done"])
    assert isinstance(engine, Engine)
    [a] = asyncio.run(engine.generate([req("r0", [1, 5])]))
    assert a.token_ids == tok.encode("echo hello", add_special_tokens=False) + [2]
    assert a.finish_reason == "stop" and a.weight_version == 0
    [b] = asyncio.run(engine.generate([req("r1", [1, 5] + a.token_ids + [7])]))
    assert tok.decode(b.token_ids[:-1]) == "done"
    assert b.n_cached_prompt_tokens == 2 + len(a.token_ids)  # the simulated prefix cache


def test_logprobs_form_a_sorted_subdistribution_and_are_deterministic(tok):
    run = lambda: asyncio.run(ScriptedEngine(tok, ["cat /app/x"], seed=3).generate([req("r", [1], n_top_logprobs=8)]))[0]
    a, b = run(), run()
    assert a == b
    for token, lp, ids, lps in zip(a.token_ids, a.logprobs, a.topk_ids, a.topk_logprobs):
        assert len(ids) == len(lps) == 8 and token in ids
        assert lps == sorted(lps, reverse=True) and lp < 0
        assert sum(math.exp(x) for x in lps) <= 1 + 1e-9
        assert lps[ids.index(token)] == lp


def test_length_cut_and_exhaustion(tok):
    engine = ScriptedEngine(tok, ["a long scripted message with many tokens"])
    [r] = asyncio.run(engine.generate([req("r", [1], max_new_tokens=3)]))
    assert len(r.token_ids) == 3 and r.finish_reason == "length"
    with pytest.raises(ScriptExhausted, match="script exhausted"):
        asyncio.run(engine.generate([req("r2", [1])]))


def test_samples_from_tiny_model_after_script(tok):
    model = build_tiny_model(len(tok))
    engine = ScriptedEngine(tok, [], model=model, seed=1)
    [r] = asyncio.run(engine.generate([req("r", [1, 10, 11], max_new_tokens=6, n_top_logprobs=4, temperature=1.0)]))
    assert 1 <= len(r.token_ids) <= 6 and len(r.logprobs) == len(r.topk_ids) == len(r.token_ids)
    assert all(lp <= 0 for lp in r.logprobs) and all(len(row) == 4 for row in r.topk_ids)
    [g] = asyncio.run(engine.generate([req("g", [1, 10, 11], max_new_tokens=4, temperature=0.0)]))
    [g2] = asyncio.run(engine.generate([req("g2", [1, 10, 11], max_new_tokens=4, temperature=0.0)]))
    assert g.token_ids == g2.token_ids  # greedy is deterministic


def test_update_weights_sets_version_and_pause_blocks(tok):
    engine = ScriptedEngine(tok, ["x", "y"])

    async def scenario():
        await engine.update_weights({}, 4)
        await engine.pause()
        pending = asyncio.ensure_future(engine.generate([req("r", [1])]))
        await asyncio.sleep(0.01)
        assert not pending.done()
        await engine.resume()
        return await pending

    [r] = asyncio.run(scenario())
    assert r.weight_version == 4 and engine.weight_version == 4


def test_script_function_sees_the_request(tok):
    engine = ScriptedEngine(tok, lambda request: f"turn {len(request.prompt_ids)}")
    [r] = asyncio.run(engine.generate([req("r", [1, 2, 3])]))
    assert tok.decode(r.token_ids[:-1]) == "turn 3"
