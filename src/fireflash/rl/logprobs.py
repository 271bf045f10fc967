"""Policy log-probs from final hidden states, in chunks of positions (RECIPE.md §5, issue 7 item 4).

Notation: T policy-sampled positions of a packed batch, K top-k candidates, V vocabulary, H hidden.

The trainer's distribution must be the engine's sampling distribution, softmax(h Wᵀ / temperature)
(``GenerateResult`` docs), so logits are divided by the rollout temperature before the softmax.

Memory: a naive ``log_softmax(hidden @ weight.T)`` holds several [T, V] tensors for backward (logits,
log-probs and their gradients: ~0.8 GB each for T = 4,096, V = 49,152 in fp32). Here a custom autograd
function walks ``chunk_tokens`` positions at a time, keeps only [T] log-sum-exps between forward and
backward, and recomputes each chunk's logits in backward, so the peak is a few [chunk, V] buffers plus
the [V, H] weight gradient. Cost: one extra [chunk, H] x [H, V] matmul per chunk in backward.
Simplification: the LM head has no bias (Llama/SmolLM2/Qwen heads have none).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class PolicyLogprobs(NamedTuple):
    """Trainer log-probs at the sampled positions (natural log, after temperature).

    target: [T] log π_θ(y_t), differentiable.
    topk: [T, K] log π_θ(s) of the sampler's candidates s ∈ S_t, differentiable ([T, 0] if none given).
    entropy: [T] policy entropy in nats, detached (a health metric; the recipe has no entropy bonus).
    """

    target: torch.Tensor
    topk: torch.Tensor
    entropy: torch.Tensor


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    # at least fp32 even for bf16 weights: log-probs feed exp() in the importance ratio.
    return (hidden @ weight.T).to(torch.promote_types(hidden.dtype, torch.float32)).mul_(inv_temperature)


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target_ids, topk_ids, inv_temperature, chunk_tokens):
        n, dtype = hidden.shape[0], torch.promote_types(hidden.dtype, torch.float32)
        target = hidden.new_empty(n, dtype=dtype)
        topk = hidden.new_empty(topk_ids.shape, dtype=dtype)
        entropy = hidden.new_empty(n, dtype=dtype)
        lse = hidden.new_empty(n, dtype=dtype)
        for start in range(0, n, chunk_tokens):
            sl = slice(start, start + chunk_tokens)
            scores = _chunk_logits(hidden[sl], weight, inv_temperature)  # [c, V]
            lse[sl] = torch.logsumexp(scores, dim=-1)
            target[sl] = scores.gather(1, target_ids[sl, None]).squeeze(1) - lse[sl]
            topk[sl] = scores.gather(1, topk_ids[sl]) - lse[sl, None]
            logp = scores.sub_(lse[sl, None])  # in place: one [c, V] buffer fewer at the peak
            entropy[sl] = -logp.exp().mul_(logp).sum(-1)
        ctx.save_for_backward(hidden, weight, target_ids, topk_ids, lse)
        ctx.inv_temperature, ctx.chunk_tokens = inv_temperature, chunk_tokens
        ctx.mark_non_differentiable(entropy)
        return target, topk, entropy

    @staticmethod
    def backward(ctx, grad_target, grad_topk, _grad_entropy):
        hidden, weight, target_ids, topk_ids, lse = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        dtype = torch.promote_types(weight.dtype, torch.float32)
        grad_weight = torch.zeros_like(weight, dtype=dtype) if ctx.needs_input_grad[1] else None
        for start in range(0, hidden.shape[0], ctx.chunk_tokens):
            sl = slice(start, start + ctx.chunk_tokens)
            # d log p(j) / d s = onehot(j) - p, so dL/ds = Σ_j g_j onehot(j) - (Σ_j g_j) p
            g_t, g_k = grad_target[sl], grad_topk[sl]
            grad_scores = _chunk_logits(hidden[sl], weight, ctx.inv_temperature).sub_(lse[sl, None]).exp_()
            grad_scores.mul_(-(g_t + g_k.sum(-1))[:, None])
            grad_scores.scatter_add_(1, target_ids[sl, None], g_t[:, None]).scatter_add_(1, topk_ids[sl], g_k)
            grad_logits = grad_scores.mul_(ctx.inv_temperature).to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[sl] = grad_logits @ weight
            if grad_weight is not None:
                grad_weight.addmm_(grad_logits.T.to(dtype), hidden[sl].to(dtype))
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def chunked_policy_logprobs(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    target_ids: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_tokens: int = 512,
) -> PolicyLogprobs:
    """log π_θ of the sampled ids and of the sampler's top-k candidates, and the entropy, chunked.

    Args:
        hidden: [T, H] final hidden states (after the final norm); row t is the state that *predicts*
            target t, i.e. the position before it in the sequence.
        lm_head_weight: [V, H] output projection (tied embeddings: the embedding matrix).
        target_ids: [T] int64 sampled ids.
        topk_ids: [T, K] int64 sampler candidates, or None when score centering is off.
        temperature: rollout sampling temperature (> 0; pass 1.0 for greedy rollouts, whose engine
            log-probs are of softmax(logits)).
        chunk_tokens: positions per chunk; peak memory ~3 x chunk_tokens x V x 4 bytes.

    Returns:
        ``PolicyLogprobs`` in fp32 (fp64 for fp64 inputs): target [T], topk [T, K], entropy [T].
        Gradients flow to ``hidden`` and ``lm_head_weight``.

    Raises:
        ValueError: bad shapes, ids outside [0, V), temperature <= 0 or chunk_tokens < 1.
    """
    n, h = hidden.shape if hidden.dim() == 2 else (-1, -1)
    vocab = lm_head_weight.shape[0]
    if topk_ids is None:
        topk_ids = torch.zeros(max(n, 0), 0, dtype=torch.long, device=hidden.device)
    if n < 0 or lm_head_weight.shape != (vocab, h) or target_ids.shape != (n,) or topk_ids.shape[:1] != (n,):
        raise ValueError(
            f"shapes: hidden {tuple(hidden.shape)} must be [T, H], lm_head_weight {tuple(lm_head_weight.shape)} "
            f"[V, H], target_ids {tuple(target_ids.shape)} [T], topk_ids {tuple(topk_ids.shape)} [T, K]"
        )
    if not temperature > 0:
        raise ValueError(f"temperature {temperature} must be > 0 (pass 1.0 for greedy rollouts)")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens {chunk_tokens} must be >= 1")
    for name, ids in (("target_ids", target_ids), ("topk_ids", topk_ids)):
        if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < vocab):
            raise ValueError(
                f"{name} range [{int(ids.min())}, {int(ids.max())}] is outside the vocabulary [0, {vocab})"
            )
    return PolicyLogprobs(
        *_ChunkedLogprobs.apply(
            hidden, lm_head_weight, target_ids.long(), topk_ids.long(), 1.0 / temperature, chunk_tokens
        )
    )
