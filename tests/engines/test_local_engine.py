"""The local engine on the tiny model: exactness, batching, versions, pause, prefix cache, speculation."""

from __future__ import annotations

import asyncio

import pytest
import torch

from fireflash.engines.local import EngineClosed, LocalEngine, PromptTooLong
from fireflash.engines.weights import WeightUpdateError
from fireflash.models import build_tiny_model
from fireflash.protocols import Engine, GenerateRequest, SamplingParams

pytestmark = pytest.mark.unit

TEXT = "echo hello > /app/hello.txt && cat /app/hello.txt; grep sed awk python3 pytest "


def req(tok, rid: str, n_copies: int = 1, **params) -> GenerateRequest:
    params.setdefault("max_new_tokens", 12)
    params.setdefault("n_top_logprobs", 8)
    return GenerateRequest(
        request_id=rid, prompt_ids=tok.encode(TEXT * n_copies), params=SamplingParams(**params)
    )


async def _gen(engine, *requests):
    return await asyncio.gather(*(engine.generate([r]) for r in requests))


def test_implements_engine_protocol(tiny):
    async def main():
        engine = LocalEngine(tiny)
        assert isinstance(engine, Engine)
        await engine.close()

    asyncio.run(main())


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
@pytest.mark.parametrize("chunk", [256, 7])
def test_logprobs_match_teacher_forced_pass(tok, tiny, temperature, top_p, chunk, assert_matches_teacher):
    """Issue 6 exactness: sampled-token logprobs within 1e-4 of a teacher-forced forward; top-k = torch.topk.
    With 7-token chunks every prompt is prefilled over several forwards packed with other rows' decoding."""
    reference = build_tiny_model(len(tok))

    async def main():
        engine = LocalEngine(tiny, max_batch_size=4, prefill_chunk_tokens=chunk)
        requests = [
            req(tok, f"r{i}", i + 1, temperature=temperature, top_p=top_p, max_new_tokens=8 + 5 * i)
            for i in range(4)
        ]
        results = await _gen(engine, *requests)
        await engine.close()
        return requests, results

    requests, results = asyncio.run(main())
    for r, (res,) in zip(requests, results, strict=True):
        assert res.finish_reason == "length" and len(res.token_ids) == r.params.max_new_tokens
        assert res.weight_version == 0
        assert_matches_teacher(reference, r, res)


@pytest.mark.parametrize("chunk", [256, 5])
def test_batched_results_equal_solo_results_with_staggered_arrivals(tok, tiny, chunk):
    """Rows join and leave between decode steps without changing any row's tokens (per-request generators),
    whether a prompt is prefilled in one forward or in chunks packed with other rows' decode steps."""
    state = {k: v.clone() for k, v in tiny.state_dict().items()}
    requests = [req(tok, f"s{i}", 1 + i % 3, max_new_tokens=6 + 4 * i) for i in range(6)]

    async def staggered():
        engine = LocalEngine(tiny, max_batch_size=3, prefill_chunk_tokens=chunk)

        async def later(i, r):
            await asyncio.sleep(0.02 * i)
            return (await engine.generate([r]))[0]

        out = await asyncio.gather(*(later(i, r) for i, r in enumerate(requests)))
        await engine.close()
        return out

    async def solo():
        model = build_tiny_model(len(tok))
        model.load_state_dict(state)
        engine = LocalEngine(model, max_batch_size=1, prefix_cache_tokens=0)
        out = [(await engine.generate([r]))[0] for r in requests]
        await engine.close()
        return out

    together, alone = asyncio.run(staggered()), asyncio.run(solo())
    for a, b in zip(together, alone, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


def test_same_seed_same_tokens_different_ids_differ(tok, tiny):
    async def main():
        engine = LocalEngine(tiny, seed=3)
        a, b, c = await engine.generate([req(tok, "x"), req(tok, "x"), req(tok, "y")])
        await engine.close()
        return a, b, c

    a, b, c = asyncio.run(main())
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids


def test_stop_token_ends_a_turn_and_is_returned(tok, tiny):
    async def main():
        engine = LocalEngine(tiny)
        (first,) = await engine.generate([req(tok, "a", temperature=0.0, max_new_tokens=5)])
        stop = first.token_ids[2]
        (res,) = await engine.generate(
            [req(tok, "a", temperature=0.0, max_new_tokens=5, stop_token_ids=[stop])]
        )
        await engine.close()
        return stop, res

    stop, res = asyncio.run(main())
    assert res.finish_reason == "stop" and res.token_ids[-1] == stop and stop not in res.token_ids[:-1]


def test_update_weights_running_requests_finish_on_their_version(tok, tiny, assert_matches_teacher):
    """In-flight rows finish on the old weights; later requests use the new ones; outputs change."""
    old = build_tiny_model(len(tok))
    new = build_tiny_model(len(tok), seed=1)

    async def main():
        engine = LocalEngine(tiny, max_batch_size=4)
        long_req = req(tok, "long", max_new_tokens=40)
        running = asyncio.create_task(engine.generate([long_req]))
        while engine.stats["decode_steps"] < 2:
            await asyncio.sleep(0.005)
        await engine.update_weights(new.state_dict(), version=1)
        assert engine.weight_version == 1
        after = req(tok, "long", max_new_tokens=40)  # same id and seed as the running request
        (res_new,) = await engine.generate([after])
        (res_old,) = await running
        await engine.close()
        return long_req, res_old, after, res_new

    long_req, res_old, after, res_new = asyncio.run(main())
    assert res_old.weight_version == 0 and res_new.weight_version == 1
    assert_matches_teacher(old, long_req, res_old)
    assert_matches_teacher(new, after, res_new)
    assert res_old.token_ids != res_new.token_ids


def test_update_weights_mid_prefill_restarts_the_prompt_on_the_new_weights(tok, tiny, assert_matches_teacher):
    """A request caught half-prefilled has sampled nothing: it is prefilled again, sampled on the new version."""
    new = build_tiny_model(len(tok), seed=1)

    async def main():
        engine = LocalEngine(tiny, prefill_chunk_tokens=1)  # one prompt token per forward: a long prefill
        request = req(tok, "mid", 20, max_new_tokens=6)
        running = asyncio.create_task(engine.generate([request]))
        while engine.stats["prefill_tokens"] < 2:
            await asyncio.sleep(0.001)
        await engine.pause()
        caught = engine.stats["prefill_tokens"]
        await engine.update_weights(new.state_dict(), version=1)
        await engine.resume()
        (res,) = await running
        await engine.close()
        return request, res, caught, engine.stats["prefill_tokens"]

    request, res, caught, total = asyncio.run(main())
    n = len(request.prompt_ids)
    assert 2 <= caught < n, "paused mid-prefill"
    assert res.weight_version == 1 and total == caught + n  # the partial prefill was discarded, not reused
    assert_matches_teacher(new, request, res)


def test_update_weights_from_hf_directory_and_bad_weights(tok, tiny, tmp_path, assert_matches_teacher):
    new = build_tiny_model(len(tok), seed=2)
    new.save_pretrained(tmp_path / "ckpt")

    async def main():
        engine = LocalEngine(tiny)
        with pytest.raises(WeightUpdateError, match="lacks"):
            await engine.update_weights({"nope.weight": torch.zeros(1)}, version=5)
        with pytest.raises(WeightUpdateError, match="shapes"):
            await engine.update_weights({"model.norm.weight": torch.zeros(3)}, version=5)
        with pytest.raises(WeightUpdateError, match="miss"):
            await engine.update_weights({"model.norm.weight": torch.zeros(64)}, version=5)
        assert engine.weight_version == 0
        await engine.update_weights(tmp_path / "ckpt", version=7)
        r = req(tok, "d")
        (res,) = await engine.generate([r])
        await engine.close()
        return r, res

    r, res = asyncio.run(main())
    assert res.weight_version == 7
    assert_matches_teacher(new, r, res)


def test_pause_holds_requests_until_resume(tok, tiny):
    async def main():
        engine = LocalEngine(tiny)
        await engine.pause()
        task = asyncio.create_task(engine.generate([req(tok, "p")]))
        await asyncio.sleep(0.2)
        assert not task.done() and engine.stats["decode_steps"] == 0
        await engine.update_weights(build_tiny_model(len(tok), seed=4).state_dict(), version=2)
        await engine.resume()
        (res,) = await task
        await engine.close()
        return res

    assert asyncio.run(main()).weight_version == 2


def test_prefix_cache_reuses_previous_turn_and_group_prompt_exactly(tok, tiny, assert_matches_teacher):
    reference = build_tiny_model(len(tok))

    async def main():
        engine = LocalEngine(tiny, prefix_cache_tokens=4096)
        first = req(tok, "t1", max_new_tokens=6)
        (r1,) = await engine.generate([first])
        second = GenerateRequest(
            request_id="t2",
            prompt_ids=first.prompt_ids + r1.token_ids + tok.encode(" ls -la"),
            params=first.params,
        )
        sibling = req(tok, "t1-sibling", max_new_tokens=6)  # another attempt of the group: same prompt
        r2, r3 = await engine.generate([second, sibling])
        await engine.close()
        return second, r2, sibling, r3

    second, r2, sibling, r3 = asyncio.run(main())
    assert r2.n_cached_prompt_tokens == len(second.prompt_ids) - len(tok.encode(" ls -la")) - 1
    assert r3.n_cached_prompt_tokens == len(sibling.prompt_ids) - 1
    assert_matches_teacher(reference, second, r2)
    assert_matches_teacher(reference, sibling, r3)


def test_group_arriving_together_prefills_its_shared_prompt_once(tok, tiny, assert_matches_teacher):
    """The attempts of a group arrive at once with one prompt: the first is prefilled (in chunks), the
    others wait for it and take its KV from the prefix cache, each prefilling only its last token."""
    reference = build_tiny_model(len(tok))
    group = [req(tok, f"g{i}", 3, max_new_tokens=5) for i in range(4)]
    other = req(tok, "other", 1, max_new_tokens=5)  # no shared prefix beyond a few tokens: not held back

    async def main():
        engine = LocalEngine(tiny, max_batch_size=8, prefill_chunk_tokens=16, prefix_cache_tokens=4096)
        results = await engine.generate([*group, other])
        await engine.close()
        return results, engine.stats

    results, stats = asyncio.run(main())
    n = len(group[0].prompt_ids)
    assert [r.n_cached_prompt_tokens for r in results[:4]] == [0, n - 1, n - 1, n - 1]
    assert stats["prefill_tokens"] == n + 3 + len(other.prompt_ids) - results[4].n_cached_prompt_tokens
    for r, res in zip([*group, other], results, strict=True):
        assert_matches_teacher(reference, r, res)


def test_rows_sharing_a_system_prompt_read_it_once_and_stay_exact(tok, tiny, assert_matches_teacher):
    """Agents with one system prompt and different tasks decode against one shared copy of its KV
    (``kv.SlotBatch``'s shared prefix); an agent with another prompt keeps its own; all stay exact."""
    reference = build_tiny_model(len(tok))
    system = tok.encode(TEXT * 4)  # 100 tokens, over the 64-token sharing threshold
    tasks = ["cat a", "ls -la /tmp", "grep x y", "sed -n 1p"]
    requests = [
        GenerateRequest(request_id=f"a{i}", prompt_ids=system + tok.encode(t),
                        params=SamplingParams(max_new_tokens=10 + 3 * i, n_top_logprobs=8))
        for i, t in enumerate(tasks)
    ]
    requests.append(req(tok, "stranger", 1, max_new_tokens=12))

    async def main():
        engine = LocalEngine(tiny, max_batch_size=8, prefill_chunk_tokens=32)

        async def later(i, r):
            await asyncio.sleep(0.01 * i)
            return (await engine.generate([r]))[0]

        out = await asyncio.gather(*(later(i, r) for i, r in enumerate(requests)))
        await engine.close()
        return out, engine.stats

    results, stats = asyncio.run(main())
    assert stats["shared_prefix_row_steps"] > 0
    for r, res in zip(requests, results, strict=True):
        assert len(res.token_ids) == r.params.max_new_tokens
        assert_matches_teacher(reference, r, res)


def test_model_whose_attention_bypasses_the_interface_is_refused(tok, tiny):
    """A model whose attention never reaches the packed attention would decode without KV: a clear error."""
    from fireflash.engines.packed import UnsupportedModel

    for layer in tiny.model.layers:  # attention that ignores the configured implementation
        config = {**tiny.config.to_dict(), "_attn_implementation": "sdpa"}
        layer.self_attn.config = type(layer.self_attn.config)(**config)

    async def main():
        engine = LocalEngine(tiny)
        with pytest.raises(UnsupportedModel, match="0 of 2 attention layers"):
            await engine.generate([req(tok, "u")])
        await engine.close()

    asyncio.run(main())


def test_sliding_window_model_is_refused(tok):
    """Packed attention sees the whole cache; a sliding-window model would be silently wrong past its window."""
    from transformers import MistralConfig, MistralForCausalLM

    from fireflash.engines.packed import UnsupportedModel

    config = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=16)
    with pytest.raises(UnsupportedModel, match="sliding-window"):
        LocalEngine(MistralForCausalLM(config))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prompt_lookup_speculation_is_exact(tok, tiny, temperature, assert_matches_teacher):
    """Drafts are verified exactly: logprobs match the teacher pass; greedy output equals plain decoding."""
    reference = build_tiny_model(len(tok))
    requests = [req(tok, f"q{i}", 2 + i, temperature=temperature, max_new_tokens=40) for i in range(3)]

    async def run(k):
        model = build_tiny_model(len(tok))
        engine = LocalEngine(model, prompt_lookup_tokens=k)
        out = await _gen(engine, *requests)
        await engine.close()
        return [o[0] for o in out], engine.stats

    spec, stats = asyncio.run(run(4))
    plain, _ = asyncio.run(run(0))
    assert stats["draft_tokens"] > 0
    for r, res in zip(requests, spec, strict=True):
        assert len(res.token_ids) == 40
        assert_matches_teacher(reference, r, res)
    if temperature == 0.0:  # the random tiny model is near-uniform at T=1, so only greedy accepts drafts
        assert stats["accepted_draft_tokens"] > 0
        assert [r.token_ids for r in spec] == [r.token_ids for r in plain]


def test_bf16_rollout_copy_differs_slightly_from_fp32(tok, tiny, teacher_forced):
    """The lower-precision copy is what the sampler's logprobs come from (the mismatch TIS corrects)."""
    reference = build_tiny_model(len(tok))

    async def main():
        engine = LocalEngine(tiny, rollout_dtype="bfloat16")
        r = req(tok, "b")
        (res,) = await engine.generate([r])
        await engine.close()
        return r, res

    r, res = asyncio.run(main())
    ref = teacher_forced(reference, r, res).gather(1, torch.tensor(res.token_ids)[:, None])[:, 0]
    gap = (torch.tensor(res.logprobs) - ref).abs().max().item()
    assert 1e-5 < gap < 0.1


def test_bad_requests_raise_clear_errors(tok, tiny):
    async def main():
        engine = LocalEngine(tiny)
        with pytest.raises(ValueError, match="prompt_ids is empty"):
            await engine.generate([GenerateRequest(request_id="e", prompt_ids=[])])
        with pytest.raises(ValueError, match=r"prompt_ids\[1\] = 100000 is outside"):
            await engine.generate([GenerateRequest(request_id="v", prompt_ids=[1, 100000])])
        with pytest.raises(PromptTooLong):
            await engine.generate([GenerateRequest(request_id="l", prompt_ids=[1] * 5000)])
        with pytest.raises(ValueError, match="rollout_dtype"):
            LocalEngine(tiny, rollout_dtype="int8")
        await engine.close()
        with pytest.raises(EngineClosed):
            await engine.generate([req(tok, "c")])

    asyncio.run(main())


def test_close_aborts_running_requests(tok, tiny):
    async def main():
        engine = LocalEngine(tiny)
        task = asyncio.create_task(engine.generate([req(tok, "z", max_new_tokens=3000)]))
        while engine.stats["decode_steps"] < 1:
            await asyncio.sleep(0.005)
        await engine.close()
        return await task

    (res,) = asyncio.run(main())
    assert (
        res.finish_reason == "abort"
        and 0 < len(res.token_ids) < 3000
        and len(res.logprobs) == len(res.token_ids)
    )
