"""Exact drift of the objective under a stale sampler, by enumerating a small vocabulary (RECIPE.md §5).

With a constant advantage the true policy gradient is 0, so E_{y~q}[∇ loss] — computed exactly as
Σ_y q(y) ∇ℓ(y) over every token y of the vocabulary — is pure drift. Nothing here restates the loss: it
only calls ``policy_loss`` on every possible sampled token and weighs the gradients by the sampler's q.
"""

import pytest
import torch

from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.loss import PolicyBatch, policy_loss

pytestmark = pytest.mark.unit
V = 6
WIDE = {"tis_clip_low": 1e-9, "tis_clip_high": 1e9}  # clip bounds that never bind for these pairs


def _pairs(n: int = 20) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n (π logits, log q) pairs over V tokens, far enough apart that the [0.5, 2] clip binds."""
    g = torch.Generator().manual_seed(25)
    out = []
    for _ in range(n):
        theta = 1.5 * torch.randn(V, generator=g, dtype=torch.float64)
        log_q = torch.log_softmax(1.5 * torch.randn(V, generator=g, dtype=torch.float64), -1)
        out.append((theta, log_q))
    return out


def drift(theta: torch.Tensor, log_q: torch.Tensor, k: int, **cfg) -> torch.Tensor:
    """E_{y~q}[∇_θ loss(y)] for π = softmax(θ), a one-token attempt with A = 1, top-k = q's k best: [V]."""
    cfg = ObjectiveConfig(loss_floor_tokens=1, **cfg)
    theta = theta.clone().requires_grad_()
    topk_logq, topk_ids = log_q.topk(k)
    total = torch.zeros(V, dtype=torch.float64)
    for y in range(V):
        logp = torch.log_softmax(theta, -1)
        batch = PolicyBatch(
            target_ids=torch.tensor([y]),
            rollout_logprobs=log_q[y : y + 1],
            topk_ids=topk_ids[None],
            topk_logprobs=topk_logq[None],
            weight_version=torch.tensor([3]),
            attempt_index=torch.tensor([0]),
            advantages=torch.tensor([1.0], dtype=torch.float64),
            n_sampled_tokens=torch.tensor([1]),
        )
        topk_lp = logp[topk_ids][None] if cfg.score_centering else None
        loss, _ = policy_loss(logp[y : y + 1], topk_lp, batch, trainer_version=3, cfg=cfg)
        (grad,) = torch.autograd.grad(loss, theta)
        total += log_q[y].exp() * grad
    return total


def _max_drift(k: int = V, **cfg) -> float:
    return max(float(drift(theta, log_q, k, **cfg).abs().max()) for theta, log_q in _pairs())


def test_the_pairs_make_the_default_clip_bind():
    ratios = torch.stack([(torch.log_softmax(t, -1) - q).exp() for t, q in _pairs()])
    assert ((ratios < 0.5) | (ratios > 2.0)).float().mean() > 0.3


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("clip", [{}, WIDE], ids=["clip-binds", "clip-never-binds"])
def test_tis_with_score_centering_has_no_drift_over_the_full_vocabulary(clip, renormalize):
    assert _max_drift(score_centering_renormalize=renormalize, **clip) <= 1e-9


def test_score_centering_alone_has_no_drift():
    assert _max_drift(tis=False) <= 1e-9


def test_without_score_centering_clipped_tis_and_plain_scores_drift():
    # unclipped TIS is unbiased (Σ_y q·(π/q)·∇log π = ∇Σπ = 0); the clip is what leaves the drift
    assert _max_drift(score_centering=False, **WIDE) <= 1e-9
    assert _max_drift(score_centering=False) > 0.05
    assert _max_drift(score_centering=False, tis=False) > 0.05


@pytest.mark.parametrize("renormalize", [True, False])
def test_top_k_short_of_the_vocabulary_leaves_drift_bounded_by_the_tail_mass(renormalize):
    # docstring of rl/loss.py: raw q̃ leaves the tail's weighted score (|·|∞ ≤ high·(1 − Q)); renormalised q̃
    # adds ((1 − Q)/Q)·Σ_{s∈S} q w ∇log π (again ≤ high·(1 − Q)); |∇_θ log π(s)|∞ ≤ 1 for π = softmax(θ)
    k, high = 3, ObjectiveConfig().tis_clip_high
    for theta, log_q in _pairs():
        tail = 1.0 - float(log_q.topk(k).values.exp().sum())
        bound = (2 if renormalize else 1) * high * tail
        assert float(drift(theta, log_q, k, score_centering_renormalize=renormalize).abs().max()) <= bound + 1e-12
