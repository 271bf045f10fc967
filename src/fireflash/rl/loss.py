"""The per-token policy loss: TIS, score centering, staleness mask and the loss floor (RECIPE.md §5).

Notation: T policy-sampled positions of a packed (micro-)batch, N attempts in the step's batch, K top-k.

    w(s) = clip(π_θ(s) / q(s), tis_clip_low, tis_clip_high)   detached, for y_t and every s ∈ S_t  (TIS)
    ℓ_t  = −A_i · ( w(y_t) log π_θ(y_t) − Σ_{s∈S_t} q̃(s) w(s) log π_θ(s) )   q̃ detached            (SC)
           on tokens at most ``max_staleness`` versions behind the trainer
    loss = (1/N) Σ_i  Σ_{t∈i} ℓ_t / max(n_sampled_tokens_i, loss_floor_tokens)

With TIS off every w is 1 (plain score centering); with SC off ℓ_t = −A_i · w(y_t) log π_θ(y_t).
The centred term is the *weighted* score (RECIPE.md §5): for y ~ q and S_t = V,
    E_q[w(y)∇log π(y)] = Σ_y q(y) w(y) ∇log π(y) = Σ_s q̃(s) w(s) ∇log π(s),
so E_q[∇ℓ_t] = 0 under a constant advantage for any π, q and clip bounds: no drift toward or away from
the stale sampler. Centring the unweighted score and then multiplying by w(y) leaves
E_q[w∇log π] − E_q[w]·E_q[∇log π] ≠ 0 (it over-corrects, away from the sampler).

q̃ is the sampler's top-k distribution: renormalised over S_t when ``score_centering_renormalize``
(softmax of the top-k log q), else the raw probabilities exp(log q) (whose mass Q_t < 1 is short of the
tail). With K < V the expected update −E_q[∇ℓ_t] is not exactly 0: raw q̃ leaves A·Σ_{s∉S_t} q(s)w(s)∇log π(s)
(the tail's weighted score); renormalised q̃ leaves that minus ((1 − Q_t)/Q_t)·Σ_{s∈S_t} q(s)w(s)∇log π(s).
Both are O(1 − Q_t), the sampler's probability mass outside its top-k. No KL term, no entropy bonus.
Because the divisor N and the per-attempt denominators are whole-batch quantities, the losses of
micro-batches that split a batch sum to the batch loss (gradient accumulation needs no rescaling).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.metrics import drift_by_staleness


class PolicyBatch(NamedTuple):
    """The rollout side of a packed batch: one row per policy-sampled position (loss mask 1).

    target_ids: [T] int64 sampled ids.
    rollout_logprobs: [T] log q(y_t) from the engine (after temperature).
    topk_ids: [T, K] int64 sampler top-k ids by descending q; pad short rows with id 0, log q = -inf.
    topk_logprobs: [T, K] their log q.
    weight_version: [T] int64 version of the weights that sampled each token (>= 0).
    attempt_index: [T] int64 index into the per-attempt tensors below, in [0, N).
    advantages: [N] the attempt's advantage A_i (``group_advantages``), for the whole step's batch.
    n_sampled_tokens: [N] the attempt's policy-sampled tokens over all its segments and micro-batches,
        stale-dropped ones included (the loss-floor numerator).
    """

    target_ids: torch.Tensor
    rollout_logprobs: torch.Tensor
    topk_ids: torch.Tensor
    topk_logprobs: torch.Tensor
    weight_version: torch.Tensor
    attempt_index: torch.Tensor
    advantages: torch.Tensor
    n_sampled_tokens: torch.Tensor


def tis_weights(
    policy_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, low: float, high: float
) -> torch.Tensor:
    """Truncated importance weights w = clip(exp(log π_θ − log q), low, high), detached (RECIPE.md §5).

    Shape: any shape → the same ([T] for sampled tokens, [T, K] for top-k candidates). No gradient flows
    through w (it reweights the score, it is not differentiated). A padded candidate (log q = -inf) gets
    ``high``, which its q̃ of 0 then cancels.
    """
    ratio = (policy_logprobs.detach() - rollout_logprobs).exp()
    return torch.nan_to_num(ratio, nan=high).clamp(low, high)


def centered_score(
    policy_logprobs: torch.Tensor,
    policy_topk_logprobs: torch.Tensor,
    rollout_topk_logprobs: torch.Tensor,
    renormalize: bool,
    weight: torch.Tensor | None = None,
    topk_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """g_t = w(y_t) log π_θ(y_t) − Σ_{s∈S_t} q̃(s) w(s) log π_θ(s); its gradient is the centred score (RECIPE.md §5).

    Args:
        policy_logprobs: [T] log π_θ(y_t), differentiable.
        policy_topk_logprobs: [T, K] log π_θ(s) of the sampler's candidates, differentiable.
        rollout_topk_logprobs: [T, K] their log q (-inf on padding, which then weighs 0).
        renormalize: q̃ = softmax over the top-k log q, else exp(log q).
        weight: [T] detached TIS weights w(y_t); None means 1 (score centering without TIS).
        topk_weight: [T, K] detached TIS weights w(s) of the candidates; None means 1.

    Returns:
        [T] the per-token centred (weighted) score; q̃ and the weights carry no gradient.
    """
    q = torch.softmax(rollout_topk_logprobs, dim=-1) if renormalize else rollout_topk_logprobs.exp()
    # a fully padded row (all -inf) gives NaN under softmax; it has no candidates, so no centering
    q = torch.nan_to_num(q, nan=0.0).to(policy_topk_logprobs.dtype)
    if topk_weight is not None:
        q = q * topk_weight.to(q.dtype)
    target = policy_logprobs if weight is None else weight * policy_logprobs
    return target - (q * policy_topk_logprobs).sum(-1)


def staleness_of(weight_version: torch.Tensor, trainer_version: int) -> torch.Tensor:
    """Versions each token lags the trainer: [T] → [T] int64.

    Raises:
        ValueError: a version < 0 (a non-sampled position was passed) or newer than the trainer's.
    """
    if weight_version.numel() and (
        int(weight_version.min()) < 0 or int(weight_version.max()) > trainer_version
    ):
        raise ValueError(
            f"weight_version range [{int(weight_version.min())}, {int(weight_version.max())}] must lie in "
            f"[0, trainer_version={trainer_version}]; pass only policy-sampled positions (loss_mask 1)"
        )
    return trainer_version - weight_version.long()


def floor_aggregate(
    token_loss: torch.Tensor, attempt_index: torch.Tensor, n_sampled_tokens: torch.Tensor, floor_tokens: int
) -> torch.Tensor:
    """(1/N) Σ_i Σ_{t∈i} ℓ_t / max(n_sampled_tokens_i, floor_tokens) (RECIPE.md §5 loss floor).

    Shape: token_loss [T], attempt_index [T], n_sampled_tokens [N] → scalar.
    """
    denominator = n_sampled_tokens.to(token_loss.dtype).clamp_min(floor_tokens)
    return (token_loss / denominator[attempt_index]).sum() / n_sampled_tokens.numel()


def _check_batch(batch: PolicyBatch) -> None:
    t, n = batch.target_ids.shape[0], batch.advantages.shape[0] if batch.advantages.dim() == 1 else 0
    per_token = ("target_ids", "rollout_logprobs", "weight_version", "attempt_index")
    bad = [f"{f} {tuple(getattr(batch, f).shape)}" for f in per_token if getattr(batch, f).shape != (t,)]
    bad += [
        f"{f} {tuple(getattr(batch, f).shape)}"
        for f in ("topk_ids", "topk_logprobs")
        if getattr(batch, f).shape[:1] != (t,)
    ]
    if batch.advantages.shape != (n,) or batch.n_sampled_tokens.shape != (n,):
        bad.append(
            f"advantages {tuple(batch.advantages.shape)} and n_sampled_tokens {tuple(batch.n_sampled_tokens.shape)}"
        )
    if bad or n == 0:
        raise ValueError(
            f"PolicyBatch shapes must be [T], [T, K] or [N] with N >= 1 attempts; got {', '.join(bad) or 'N = 0'}"
        )
    if t and not (0 <= int(batch.attempt_index.min()) and int(batch.attempt_index.max()) < n):
        raise ValueError(
            f"PolicyBatch.attempt_index must lie in [0, {n}) (one entry per attempt in advantages)"
        )
    if not bool(torch.isfinite(batch.rollout_logprobs).all()):
        raise ValueError(
            "PolicyBatch.rollout_logprobs has NaN/inf: the engine must return log q of every sampled token"
        )


def policy_loss(
    policy_logprobs: torch.Tensor,
    policy_topk_logprobs: torch.Tensor | None,
    batch: PolicyBatch,
    trainer_version: int,
    cfg: ObjectiveConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The batch loss of RECIPE.md §5 from trainer log-probs and the rollout record.

    Args:
        policy_logprobs: [T] log π_θ(y_t), differentiable (``chunked_policy_logprobs(...).target``).
        policy_topk_logprobs: [T, K'] log π_θ of ``batch.topk_ids[:, :K']``; None when SC is off.
        batch: the rollout side (see ``PolicyBatch``).
        trainer_version: the trainer's current weight version.
        cfg: tis*, score_centering*, loss_floor_tokens, max_staleness.

    Returns:
        (loss scalar, metrics): ``tis/clip_low_share``, ``tis/clip_high_share`` (of kept tokens),
        ``stale/dropped_share`` and the ``drift/*`` metrics of ``drift_by_staleness``.

    Raises:
        ValueError: inconsistent shapes, out-of-range attempt indices or versions, non-finite log q, or
            SC on without top-k log-probs (None or K = 0).
    """
    _check_batch(batch)
    staleness = staleness_of(batch.weight_version, trainer_version)
    keep = staleness <= cfg.max_staleness
    ratio = (policy_logprobs.detach() - batch.rollout_logprobs).exp()  # for the clip-share metrics
    weight = torch.ones_like(ratio)
    if cfg.tis:
        weight = tis_weights(policy_logprobs, batch.rollout_logprobs, cfg.tis_clip_low, cfg.tis_clip_high)
    advantage = batch.advantages.to(policy_logprobs.dtype)[batch.attempt_index]
    if cfg.score_centering:
        if policy_topk_logprobs is None or policy_topk_logprobs.shape[-1] == 0:
            raise ValueError(
                "score_centering is on but there are no top-k log-probs: have the engine return top-k "
                "(SamplingParams.n_top_logprobs > 0) and pass topk_ids to the log-prob pass, or set "
                "rl.score_centering = false"
            )
        k = policy_topk_logprobs.shape[1]
        rollout_topk = batch.topk_logprobs[:, :k].to(policy_topk_logprobs.dtype)
        topk_weight = None
        if cfg.tis:
            topk_weight = tis_weights(policy_topk_logprobs, rollout_topk, cfg.tis_clip_low, cfg.tis_clip_high)
        score = centered_score(
            policy_logprobs, policy_topk_logprobs, rollout_topk, cfg.score_centering_renormalize,
            weight if cfg.tis else None, topk_weight,
        )
    else:
        score = weight * policy_logprobs
    token_loss = torch.where(keep, -advantage * score, torch.zeros_like(score))
    loss = floor_aggregate(token_loss, batch.attempt_index, batch.n_sampled_tokens, cfg.loss_floor_tokens)
    n_keep = max(int(keep.sum()), 1)
    metrics = {
        "tis/clip_low_share": float(((ratio < cfg.tis_clip_low) & keep).sum()) / n_keep,
        "tis/clip_high_share": float(((ratio > cfg.tis_clip_high) & keep).sum()) / n_keep,
        "stale/dropped_share": 1.0 - float(keep.sum()) / max(keep.numel(), 1),
    }
    metrics |= drift_by_staleness(policy_logprobs, batch.rollout_logprobs, staleness, cfg.max_staleness)
    return loss, metrics
