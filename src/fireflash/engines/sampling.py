"""Sampling math shared by the local engine: the sampling distribution, its top-K, and token draws.

The distribution every logprob refers to (RECIPE.md §1, §5; ``GenerateResult`` in protocols.py):

    q(y) = softmax(logits / T)[y]            T = temperature > 0
    q(y) = softmax(logits)[y]                T = 0 (greedy: the argmax is taken, logprobs are of T = 1)

Top-p truncation changes which tokens can be *drawn*, never the reported log q: the trainer recomputes
log q from its own logits and temperature only, so truncation must stay out of the number it compares
against. Draws use one ``torch.Generator`` per request so a request's tokens do not depend on which other
requests share its batch.

Shape notation: B rows (requests) in a batch, V vocabulary, K top-k candidates.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import torch


def request_seed(engine_seed: int, request_id: str, seed: int | None) -> int:
    """The seed of one request's generator: ``seed`` when given, else a stable hash of engine seed and id.

    crc32 rather than ``hash()``: Python salts string hashes per process, which would break determinism.
    """
    if seed is not None:
        return int(seed)
    return zlib.crc32(f"{engine_seed}:{request_id}".encode())


def sampling_logprobs(logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """log q over the vocabulary under the temperature-scaled distribution.

    Args:
        logits: [..., V] raw model logits (any float dtype; computed in fp32).
        temperatures: broadcastable to ``logits[..., :1]``, e.g. [B, 1] or [B, 1, 1]; 0 means greedy and is
            scored as temperature 1.

    Returns:
        [..., V] fp32 natural-log probabilities.
    """
    t = torch.where(temperatures > 0, temperatures, torch.ones_like(temperatures)).to(torch.float32)
    return torch.log_softmax(logits.to(torch.float32) / t, dim=-1)


def top_k(logq: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most likely ids and their log q, by descending q (ties: lower id first is not guaranteed).

    Args:
        logq: [..., V]; k: 0 <= k (clamped to V).

    Returns:
        ids [..., k] int64 and values [..., k] fp32.
    """
    k = min(k, logq.shape[-1])
    values, ids = torch.topk(logq, k, dim=-1, sorted=True)
    return ids, values


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` [V] with everything outside the smallest set of mass >= top_p zeroed (not renormalised)."""
    if top_p >= 1.0:
        return probs
    sorted_probs, order = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=0) - sorted_probs
    keep = mass_before < top_p  # the most likely token always survives
    out = torch.zeros_like(probs)
    out[order[keep]] = sorted_probs[keep]
    return out


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One id from the unnormalised weights ``probs`` [V] by inverse CDF with a single uniform draw."""
    cdf = torch.cumsum(probs, dim=0)
    u = torch.rand(1, generator=generator, dtype=cdf.dtype) * cdf[-1]
    return int(torch.searchsorted(cdf, u).clamp_(max=probs.shape[0] - 1).item())


def sample_token(
    logq_row: torch.Tensor,
    raw_logits_row: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
) -> int:
    """Draw one id for one position.

    Args:
        logq_row: [V] log q of this position (``sampling_logprobs``).
        raw_logits_row: [V] the raw logits (greedy takes their argmax).
        temperature: 0 → greedy; top_p: nucleus mass in (0, 1].
        generator: the request's generator (advanced by exactly one uniform draw unless greedy).
    """
    if temperature == 0:
        return int(torch.argmax(raw_logits_row).item())
    return draw(_nucleus(logq_row.exp(), top_p), generator)


def accept_draft(
    logq_row: torch.Tensor,
    raw_logits_row: torch.Tensor,
    draft_id: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
) -> tuple[bool, int]:
    """Speculative verification of one deterministic draft token (prompt lookup proposes point masses).

    With a point-mass draft d, speculative sampling accepts d with probability p(d) and otherwise draws
    from p with d removed (renormalised); the emitted token is then distributed exactly as p, where p is
    the top-p-truncated sampling distribution (Leviathan et al. 2023, Algorithm 1 with q_draft = δ_d).
    Greedy accepts iff d is the argmax.

    Returns:
        (accepted, token): token == draft_id when accepted, else the replacement draw.
    """
    if temperature == 0:
        best = int(torch.argmax(raw_logits_row).item())
        return best == draft_id, best
    p = _nucleus(logq_row.exp(), top_p)
    total = p.sum()
    u = torch.rand(1, generator=generator, dtype=p.dtype) * total
    if bool(u < p[draft_id]):
        return True, draft_id
    residual = p.clone()
    residual[draft_id] = 0.0
    if float(residual.sum()) <= 0.0:  # all mass on the draft: rejection is impossible in exact arithmetic
        return True, draft_id
    return False, draw(residual, generator)


def make_generators(seeds: Sequence[int]) -> list[torch.Generator]:
    """One CPU generator per request, seeded."""
    return [torch.Generator().manual_seed(int(s)) for s in seeds]
