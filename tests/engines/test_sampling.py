"""Sampling math, prompt lookup and the padded KV batch, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fireflash.engines.kv import PrefixCache, SlotBatch
from fireflash.engines.lookup import propose_draft
from fireflash.engines.sampling import accept_draft, request_seed, sample_token, sampling_logprobs

pytestmark = pytest.mark.unit


def test_logprobs_are_temperature_scaled_and_greedy_uses_t1():
    logits = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    out = sampling_logprobs(logits, torch.tensor([[0.5], [0.0]]))
    z = math.log(math.exp(2) + math.exp(4) + math.exp(6))
    assert out[0].tolist() == pytest.approx([2 - z, 4 - z, 6 - z], abs=1e-6)
    z1 = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    assert out[1].tolist() == pytest.approx([1 - z1, 2 - z1, 3 - z1], abs=1e-6)


def test_top_p_restricts_draws_but_not_reported_logprobs():
    logits = torch.tensor([3.0, 2.9, -5.0, -5.0])
    logq = sampling_logprobs(logits, torch.tensor([1.0]))
    g = torch.Generator().manual_seed(0)
    draws = {sample_token(logq, logits, 1.0, 0.5, g) for _ in range(200)}
    assert draws == {0}  # token 0 alone holds >= 0.5 of the mass
    assert float(logq[0].exp()) < 0.6


def test_speculative_acceptance_preserves_the_distribution():
    """Point-mass drafts verified by accept_draft yield tokens distributed as p (Leviathan et al. Alg. 1)."""
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    logq = sampling_logprobs(logits, torch.tensor([1.0]))
    g = torch.Generator().manual_seed(1)
    n = 8000
    counts = np.zeros(4)
    for _ in range(n):
        _, token = accept_draft(logq, logits, 1, 1.0, 1.0, g)
        counts[token] += 1
    assert counts / n == pytest.approx([0.5, 0.3, 0.15, 0.05], abs=0.02)


def test_greedy_draft_accepted_only_if_argmax():
    logits = torch.tensor([0.0, 5.0, 1.0])
    logq = sampling_logprobs(logits, torch.tensor([0.0]))
    g = torch.Generator()
    assert accept_draft(logq, logits, 1, 0.0, 1.0, g) == (True, 1)
    assert accept_draft(logq, logits, 2, 0.0, 1.0, g) == (False, 1)


def test_request_seed_is_stable_and_explicit_seed_wins():
    assert request_seed(0, "a", None) == request_seed(0, "a", None) != request_seed(0, "b", None)
    assert request_seed(0, "a", 7) == 7


def test_propose_draft_copies_after_latest_match():
    history = np.array([5, 6, 7, 8, 9, 1, 6, 7, 2, 3, 6, 7])
    assert propose_draft(history, 3, ngram_max=2) == [2, 3, 6]  # latest "6 7" is followed by 2 3 6
    assert propose_draft(np.array([1, 2, 3, 4]), 3) == []
    assert propose_draft(history, 0) == []


def _kv(values: list[float], layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    t = torch.tensor(values).view(1, 1, -1, 1)
    return [(t.clone(), -t.clone()) for _ in range(layers)]


def test_slot_batch_writes_steps_at_each_rows_length_and_skips_rejected_drafts():
    batch = SlotBatch()
    batch.add_row(_kv([1.0, 2.0]))
    batch.add_row(_kv([3.0, 4.0, 5.0, 6.0]))
    mask = batch.begin_step(width=2)  # two new tokens per row, at columns 2-3 (row 0) and 4-5 (row 1)
    assert mask.shape == (2, 1, 2, 6)
    assert mask[0, 0].long().tolist() == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]
    assert mask[1, 0].long().tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]
    for layer in range(2):
        new = torch.tensor([[10.0, 11.0], [12.0, 13.0]]).view(2, 1, 2, 1)
        keys, values = batch.update(new, -new, layer)
        assert keys.shape == (2, 1, 6, 1) and keys[0, 0, :4, 0].tolist() == [1, 2, 10, 11]
    batch.advance(torch.tensor([1, 2]))  # row 0's draft was rejected: only its first token counts
    assert batch.lengths.tolist() == [3, 6]
    assert [k[0, 0, :, 0].tolist() for k, _ in batch.row_kv(0)] == [[1.0, 2.0, 10.0]] * 2
    assert batch.row_kv(1)[1][1][0, 0, :, 0].tolist() == [-3.0, -4.0, -5.0, -6.0, -12.0, -13.0]


def test_slot_batch_leaving_rows_moves_only_the_rows_past_the_end():
    batch = SlotBatch()
    for n in range(4):
        batch.add_row(_kv([float(10 * n + j) for j in range(n + 1)]))
    order = batch.keep_rows([0, 3])  # slot 1 is a hole, row 3 moves into it; row 0 stays
    assert order == [0, 3] and batch.lengths.tolist() == [1, 4]
    assert [k[0, 0, :, 0].tolist() for k, _ in batch.row_kv(1)] == [[30.0, 31.0, 32.0, 33.0]] * 2
    assert batch.keep_rows([1]) == [1] and batch.row_kv(0)[0][0][0, 0, :, 0].tolist() == [30, 31, 32, 33]
    assert batch.keep_rows([]) == [] and batch.n_rows == 0
    batch.add_row(_kv([5.0]))  # usable again after emptying
    assert batch.lengths.tolist() == [1]


def test_prefix_cache_returns_longest_common_prefix_and_evicts_lru():
    cache = PrefixCache(max_tokens=6)
    cache.insert(np.array([1, 2]), _kv([1.0, 2.0]))
    cache.insert(np.array([1, 2, 3]), _kv([1.0, 2.0, 3.0]))
    n, kv = cache.lookup(np.array([1, 2, 3, 4]))
    assert n == 3 and kv[0][0].shape[2] == 3
    assert cache.lookup(np.array([1, 2, 3]))[0] == 2  # strict: at least one token left to prefill
    n, kv = cache.lookup(np.array([1, 2, 7, 7]))  # shares two tokens with [1, 2, 3]
    assert n == 2 and kv[1][1][0, 0, :, 0].tolist() == [-1.0, -2.0]
    cache.insert(np.array([9, 9]), _kv([0.0, 0.0]))  # 7 tokens > 6: evicts the least recently used, [1, 2]
    assert len(cache) == 2 and cache.lookup(np.array([9, 9, 9]))[0] == 2
    assert cache.lookup(np.array([1, 2, 3, 4]))[0] == 3
