"""The trainer's single entry point: final hidden states + rollout record → (loss, metrics) (RECIPE.md §5).

Notation: T policy-sampled positions of a packed (micro-)batch, N attempts, K top-k, V vocab, H hidden.
"""

from __future__ import annotations

import torch

from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.logprobs import chunked_policy_logprobs
from fireflash.rl.loss import PolicyBatch, policy_loss


def objective_loss(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    batch: PolicyBatch,
    trainer_version: int,
    temperature: float,
    cfg: ObjectiveConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Success-shifted GRPO with TIS, top-k score centering and the loss floor, computed in chunks.

    Args:
        hidden: [T, H] final hidden states; row t predicts ``batch.target_ids[t]``.
        lm_head_weight: [V, H] output projection.
        batch: ``PolicyBatch`` (per-token rollout record, per-attempt advantages and token counts).
        trainer_version: the trainer's current weight version.
        temperature: rollout sampling temperature (> 0).
        cfg: ``ObjectiveConfig``; SC uses the first ``score_centering_topk`` candidates.

    Returns:
        (loss scalar, metrics): ``policy_loss``'s metrics plus ``entropy/mean`` (nats, over all T
        sampled positions, stale ones included) and ``tokens/n`` (T).

    Raises:
        ValueError: see ``chunked_policy_logprobs`` and ``policy_loss``.
    """
    topk_ids = batch.topk_ids[:, : cfg.score_centering_topk] if cfg.score_centering else None
    logprobs = chunked_policy_logprobs(
        hidden, lm_head_weight, batch.target_ids, topk_ids, temperature, cfg.logprob_chunk_tokens
    )
    loss, metrics = policy_loss(
        logprobs.target, logprobs.topk if cfg.score_centering else None, batch, trainer_version, cfg
    )
    metrics["entropy/mean"] = logprobs.entropy.mean().item() if logprobs.entropy.numel() else 0.0
    metrics["tokens/n"] = float(batch.target_ids.shape[0])
    return loss, metrics
