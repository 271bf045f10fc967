"""Shared-prefix forward passes: rows that open with the same tokens run those tokens once.

Every attempt of a GRPO group opens with the same system prompt and task turn (~1,000 of its ~1,150
tokens with SmolLM2's tool prompt), and every oracle trajectory of the warm-up with the same system
prompt. The body runs the shared prefix once as a batch of one; its keys and values are expanded
(a view, no copy) to every row, and the right-padded suffixes attend to them.

With ``prefix_grad=True`` (the RL trainer) the prefix runs with autograd, and the backward pass sums
every row's gradient through the expanded keys/values into that single prefix pass: the gradient is the
full one, only computed once instead of once per row (test: ``tests/training/test_prefix.py``). With
``prefix_grad=False`` (the warm-up's ``sft.share_prefix``) the prefix runs without autograd, which also
drops the gradient that flows into the weights through the prefix's keys and values.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from fireflash.models import kv_cache_name

KV_CACHE = kv_cache_name()  # "cache" (transformers >= 5.24) or "past_key_values"


def common_prefix_len(rows: Sequence[Sequence[int]]) -> int:
    """Number of leading tokens all ``rows`` share (0 for no rows)."""
    if not rows:
        return 0
    first = rows[0]
    n = min(len(r) for r in rows)
    for other in rows[1:]:
        i = 0
        while i < n and other[i] == first[i]:
            i += 1
        n = i
    return n


def shared_prefix_hidden(
    model: torch.nn.Module, prefix_ids: torch.Tensor, suffix_ids: torch.Tensor, prefix_grad: bool
) -> torch.Tensor:
    """Final hidden states [B, S, H] of the suffix rows, each attending to ``prefix_ids`` first.

    Args:
        model: causal LM with ``model.model`` (the body), as transformers' Llama / Qwen / SmolLM2 classes.
        prefix_ids: [P] int64 tokens every row starts with (P may be 0: a plain forward pass).
        suffix_ids: [B, S] int64 the rest of each row, right-padded. Right padding needs no attention
            mask: a real token never attends to a later (pad) position, and pad positions are never read.
        prefix_grad: run the prefix with autograd (exact gradient) or without (see the module docstring).
    """
    body = model.model
    if not prefix_ids.numel():
        return body(input_ids=suffix_ids).last_hidden_state
    rows = suffix_ids.shape[0]
    with torch.set_grad_enabled(prefix_grad and torch.is_grad_enabled()):
        cache = getattr(body(input_ids=prefix_ids[None], use_cache=True), KV_CACHE)
        kv = [(layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1)) for layer in cache.layers]
    shared = DynamicCache(ddp_cache_data=kv, config=model.config)
    return body(input_ids=suffix_ids, use_cache=True, **{KV_CACHE: shared}).last_hidden_state
