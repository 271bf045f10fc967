"""Exactness of the local engine on the embedded SmolLM2-135M (issue 6): logprobs vs a teacher-forced pass."""

from __future__ import annotations

import asyncio

import pytest

from fireflash.engines.local import LocalEngine
from fireflash.models import load_policy, load_tokenizer
from fireflash.protocols import GenerateRequest, SamplingParams

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_smollm2_logprobs_and_topk_match_teacher_forced_pass(assert_matches_teacher):
    tok = load_tokenizer("smollm2-135m")
    model = load_policy("smollm2-135m")
    messages = [
        [{"role": "user", "content": "List the files in /app, then print hello.txt."}],
        [{"role": "user", "content": "Write a bash one-liner that counts lines in all .py files."}],
    ]
    requests = [
        GenerateRequest(
            request_id=f"smol{i}",
            prompt_ids=tok.apply_chat_template(
                m, add_generation_prompt=True, tokenize=True, return_dict=False
            ),
            params=SamplingParams(
                temperature=t, max_new_tokens=12, n_top_logprobs=32, stop_token_ids=[tok.eos_token_id]
            ),
        )
        for i, (m, t) in enumerate(zip(messages, [1.0, 0.6], strict=True))
    ]

    async def main():
        engine = LocalEngine(model, max_batch_size=2, prompt_lookup_tokens=3)
        out = await asyncio.gather(*(engine.generate([r]) for r in requests))
        await engine.close()
        return [o[0] for o in out]

    for r, res in zip(requests, asyncio.run(main()), strict=True):
        assert res.token_ids and len(res.topk_ids[0]) == 32
        assert_matches_teacher(model, r, res)  # fp32 weights, never updated: the engine's own weights
