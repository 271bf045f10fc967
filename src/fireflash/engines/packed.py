"""Packed forward of the local engine: decode rows and prefill chunks of other requests in one forward pass.

Why: on a CPU, prefilling a turn's tool result is compute-bound (~300-450 tokens/s for SmolLM2-135M on 2
cores) while a decode step of 16 rows is bound by reading the weights (~0.15-0.4 s whatever the rows do).
Run separately, every prefill stalls all decoding rows; packed together, the decode rows' 16 tokens add a
few percent to a 256-token prefill chunk's matmuls and their decode step costs nearly nothing (the
"chunked prefill" / mixed batches of vLLM and SGLang).

How: all new tokens go through the model as one sequence ``[1, N]`` with their own position ids, so every
linear layer runs once over N real tokens (no padding). Only attention differs per request; it is
dispatched through transformers' ``AttentionInterface`` to ``packed_attention``, which splits the packed
queries, keys and values by the ``PackPlan`` passed as a forward keyword, appends keys/values to each
part's own KV cache, and attends each part to its own cache:

- the decode part: B rows × w tokens each (w = 1, or 1 + draft length when speculating), written into
  the rows' slots (``kv.SlotBatch``), each row attending to its own length, causal among the w tokens;
  rows that share a prefix (the system prompt) read its KV once together (``shared_prefix_attention``);
- one prefill part per request being prefilled: a chunk of its prompt appended to its private cache
  (which starts from a prefix-cache hit or empty), causal with the cache offset.

Without a plan the function is transformers' SDPA attention (with SDPA's masks), so the model keeps working
for anything else that calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from fireflash.engines.kv import SlotBatch

ATTN_IMPLEMENTATION = "fireflash_packed"
PLAN_KWARG = "fireflash_pack"


class UnsupportedModel(TypeError):
    """The model's attention layers do not dispatch through transformers' ``AttentionInterface``."""


@dataclass
class DecodePart:
    """The decode rows of one padded batch: ``rows`` × ``width`` packed tokens, row-major.

    Attributes:
        cache: the rows' ``kv.SlotBatch``; ``update`` writes each layer's [rows, H_kv, width, D].
        mask: [rows, 1, width, L] bool from ``SlotBatch.begin_step``, True where a query may attend.
    """

    cache: SlotBatch
    rows: int
    width: int
    mask: torch.Tensor


@dataclass
class PrefillPart:
    """``n_new`` consecutive prompt tokens of one request, appended to its own cache.

    Attributes:
        cache: the request's KV cache so far (C columns); each layer appends [1, H_kv, n_new, D].
        mask: [1, 1, n_new, C + n_new] bool (causal with offset C); None when C = 0 (plain causal).
    """

    cache: DynamicCache
    n_new: int
    mask: torch.Tensor | None


@dataclass
class PackPlan:
    """How the packed sequence splits: the decode part first (if any), then the prefill parts in order."""

    decode: DecodePart | None
    prefills: list[PrefillPart]
    layers_seen: set[int] = field(default_factory=set)


def prefill_mask(n_cached: int, n_new: int) -> torch.Tensor | None:
    """[1, 1, n_new, n_cached + n_new] bool: query i attends to columns <= n_cached + i; None if no cache."""
    if n_cached == 0:
        return None
    cols = torch.arange(n_cached + n_new)
    rows = torch.arange(n_new).unsqueeze(1) + n_cached
    return (cols <= rows)[None, None]


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention over a packed sequence (``AttentionInterface`` signature).

    Args:
        query: [1, H, N, D]; key, value: [1, H_kv, N, D] (RoPE applied); N = decode rows × width +
            the prefill parts' tokens.
        kwargs[PLAN_KWARG]: the ``PackPlan``; without one this is transformers' SDPA attention.

    Returns:
        ([1, N, H, D] attention output, None).
    """
    plan: PackPlan | None = kwargs.pop(PLAN_KWARG, None)
    if plan is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    layer = module.layer_idx
    plan.layers_seen.add(layer)
    gqa = query.shape[1] != key.shape[1]
    outs, offset = [], 0
    if plan.decode is not None:
        d = plan.decode
        n = d.rows * d.width

        def rows_of(t: torch.Tensor) -> torch.Tensor:  # [1, H, n, D] → [B, H, w, D]
            return t[0, :, :n].unflatten(1, (d.rows, d.width)).transpose(0, 1)

        keys, values = d.cache.update(rows_of(key), rows_of(value), layer)
        if d.cache.sharing.numel():
            out = shared_prefix_attention(
                rows_of(query), keys, values, d.mask, *d.cache.shared_kv(layer), d.cache.sharing, scaling
            )
        else:
            out = F.scaled_dot_product_attention(
                rows_of(query), keys, values, attn_mask=d.mask, scale=scaling, enable_gqa=gqa
            )
        outs.append(out.transpose(0, 1).flatten(1, 2))  # [H, n, D]
        offset = n
    for p in plan.prefills:
        span = slice(offset, offset + p.n_new)
        keys, values = p.cache.update(key[:, :, span], value[:, :, span], layer)
        out = F.scaled_dot_product_attention(
            query[:, :, span], keys, values, attn_mask=p.mask, is_causal=p.mask is None, scale=scaling,
            enable_gqa=gqa,
        )
        outs.append(out[0])
        offset += p.n_new
    return torch.cat(outs, dim=1).transpose(0, 1).unsqueeze(0), None


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention that also returns the log-sum-exp of the scores (to merge partial attentions).

    Args:
        q: [..., M, D]; k, v: [..., L, D]; mask: broadcastable to [..., M, L], True where q may attend
            (every query must see at least one column), or None.

    Returns:
        (output [..., M, D], log-sum-exp [..., M, 1]).
    """
    scores = torch.matmul(q * scale, k.transpose(-1, -2))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.matmul(torch.exp(scores - lse), v), lse


def shared_prefix_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    shared_keys: torch.Tensor,
    shared_values: torch.Tensor,
    sharing: torch.Tensor,
    scaling: float | None,
) -> torch.Tensor:
    """Decode attention of B rows over their own KV columns plus, for the rows in ``sharing``, one shared
    prefix read once for all of them (cascade attention: FlashInfer's shared-prefix batch decoding;
    Juravsky et al. 2024, "Hydragen"). The two partial softmaxes merge exactly by their log-sum-exps:
    o = (e^{l_s} o_s + e^{l_o} o_o) / (e^{l_s} + e^{l_o}).

    Args:
        query: [B, H, w, D] (H = G × H_kv query heads; head h reads KV head h // G, as transformers'
            ``repeat_kv``); keys, values: [B, H_kv, L, D] own columns; mask: [B, 1, w, L] bool over them.
        shared_keys, shared_values: [1, H_kv, P, D], every position of which all sharing rows attend to.
        sharing: [S] int64 row indices using the shared prefix.
        scaling: score scale (default D ** -0.5).

    Returns:
        [B, H, w, D] attention output in ``query``'s dtype (exact up to float rounding;
        tests/engines/test_kv.py). Half-precision inputs are computed in float32, as SDPA's CPU kernel
        accumulates them: scores, log-sum-exps and the merge rounded to bf16 would be ~7x less accurate
        than the unshared path's SDPA.
    """
    dtype = query.dtype
    work = torch.promote_types(dtype, torch.float32)  # float32 for bf16 / fp16; a no-op for float32
    query, keys, values = query.to(work), keys.to(work), values.to(work)
    shared_keys, shared_values = shared_keys.to(work), shared_values.to(work)
    b, h, w, d = query.shape
    h_kv, length = keys.shape[1], keys.shape[2]
    g = h // h_kv
    scale = d**-0.5 if scaling is None else scaling
    q = query.reshape(b, h_kv, g * w, d)  # query heads grouped under their KV head: row g*w + j
    own_mask = mask.unsqueeze(2).expand(b, 1, g, w, length).reshape(b, 1, g * w, length)
    out, lse = _attend(q, keys, values, own_mask, scale)  # [B, H_kv, G*w, D], [B, H_kv, G*w, 1]
    s = sharing.shape[0]
    # the sharing rows' queries as one batch per KV head: the prefix keys are read once, not S times
    qs = q[sharing].transpose(0, 1).reshape(h_kv, s * g * w, d)
    out_s, lse_s = _attend(qs, shared_keys[0], shared_values[0], None, scale)
    out_s = out_s.view(h_kv, s, g * w, d).transpose(0, 1)
    lse_s = lse_s.view(h_kv, s, g * w, 1).transpose(0, 1)
    out_o, lse_o = out[sharing], lse[sharing]
    total = torch.logaddexp(lse_o, lse_s)
    out[sharing] = out_o * torch.exp(lse_o - total) + out_s * torch.exp(lse_s - total)
    return out.view(b, h, w, d).to(dtype)


AttentionInterface.register(ATTN_IMPLEMENTATION, packed_attention)
# masks as for SDPA, so a plain forward of the engine's model (a test's teacher-forced pass, padded
# batches) stays correct; packed forwards ignore the mask it builds
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)


def use_packed_attention(model: torch.nn.Module) -> None:
    """Route ``model``'s attention through ``packed_attention`` (the local engine owns the model).

    Raises:
        UnsupportedModel: not a transformers model with a config, or one with sliding-window attention.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise UnsupportedModel(
            f"{type(model).__name__} is not a transformers model with a config; the local engine needs one"
        )
    sliding = "sliding_attention" in (getattr(config, "layer_types", None) or []) or (
        getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    )
    if sliding:  # packed attention attends to the whole cache: silently wrong past the window
        raise UnsupportedModel(
            f"{type(model).__name__} uses sliding-window attention, which the local engine does not implement; "
            "serve it with SGLang or vLLM (engine.kind)"
        )
    config._attn_implementation = ATTN_IMPLEMENTATION


def packed_forward(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    plan: PackPlan,
    keep: torch.Tensor,
) -> torch.Tensor:
    """One forward over the packed tokens; returns [len(keep), V] logits at the packed indices ``keep``.

    Args:
        input_ids, positions: [N] token ids and their RoPE positions, in ``plan`` order.
        keep: [K] int64 indices into the packed sequence whose logits are needed (the vocabulary
            projection runs only there).

    Raises:
        UnsupportedModel: some attention layer did not go through ``packed_attention`` (its KV would
            be missing): the model's attention does not use transformers' ``AttentionInterface``.
    """
    n_layers = model.config.num_hidden_layers
    out = model(
        input_ids=input_ids.unsqueeze(0),
        position_ids=positions.unsqueeze(0),
        use_cache=False,
        logits_to_keep=keep,
        **{PLAN_KWARG: plan},
    )
    if len(plan.layers_seen) != n_layers:
        raise UnsupportedModel(
            f"{type(model).__name__}: {len(plan.layers_seen)} of {n_layers} attention layers used the packed "
            "attention; the local engine needs a model whose attention dispatches through transformers' "
            "AttentionInterface (Llama, Qwen2/3, Mistral, Gemma families do)"
        )
    return out.logits[0]
