"""TIS, score centering, staleness and the loss floor against hand-computed values (RECIPE.md §5)."""

import math

import pytest
import torch

from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.loss import PolicyBatch, centered_score, policy_loss, tis_weights

pytestmark = pytest.mark.unit
PLAIN = {"tis": False, "score_centering": False, "loss_floor_tokens": 1}


def _batch(
    rollout_logprobs,
    attempt_index,
    advantages,
    n_sampled_tokens,
    *,
    versions=None,
    target_ids=None,
    topk_ids=None,
    topk_logprobs=None,
):
    t = len(rollout_logprobs)
    return PolicyBatch(
        target_ids=torch.tensor(target_ids if target_ids is not None else [0] * t),
        rollout_logprobs=torch.tensor(rollout_logprobs, dtype=torch.float64),
        topk_ids=torch.tensor(topk_ids) if topk_ids is not None else torch.zeros(t, 0, dtype=torch.long),
        topk_logprobs=torch.tensor(topk_logprobs, dtype=torch.float64)
        if topk_logprobs is not None
        else torch.zeros(t, 0),
        weight_version=torch.tensor(versions if versions is not None else [0] * t),
        attempt_index=torch.tensor(attempt_index),
        advantages=torch.tensor(advantages, dtype=torch.float64),
        n_sampled_tokens=torch.tensor(n_sampled_tokens),
    )


def test_tis_clips_ratios_below_inside_and_above():
    # ratios π/q = 0.1/0.4, 0.3/0.2, 0.8/0.2 = 0.25, 1.5, 4.0 → weights 0.5, 1.5, 2.0
    policy = torch.tensor([0.1, 0.3, 0.8], dtype=torch.float64).log().requires_grad_()
    rollout = [math.log(0.4), math.log(0.2), math.log(0.2)]
    w = tis_weights(policy, torch.tensor(rollout, dtype=torch.float64), 0.5, 2.0)
    torch.testing.assert_close(w, torch.tensor([0.5, 1.5, 2.0], dtype=torch.float64))
    assert not w.requires_grad
    # one attempt, A = 1, floor 1: loss = -(1/3) Σ w_t log π_t, so d loss / d log π_t = -w_t / 3 exactly;
    # a gradient through w would add -w_t log π_t / 3 on the unclipped token
    cfg = ObjectiveConfig(tis=True, score_centering=False, loss_floor_tokens=1)
    loss, m = policy_loss(policy, None, _batch(rollout, [0, 0, 0], [1.0], [3]), 0, cfg)
    (grad,) = torch.autograd.grad(loss, policy)
    torch.testing.assert_close(grad, -torch.tensor([0.5, 1.5, 2.0], dtype=torch.float64) / 3)
    assert m["tis/clip_low_share"] == pytest.approx(1 / 3) and m["tis/clip_high_share"] == pytest.approx(
        1 / 3
    )


def test_sc_with_full_vocab_and_on_policy_q_leaves_the_gradient_unchanged():
    # Σ_s π(s) ∇log π(s) = ∇ Σ_s π(s) = 0: centering has zero expectation when q = π over all of V
    torch.manual_seed(0)
    logits = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(logits, -1)
    targets = torch.tensor([0, 3, 5, 2])
    topk = torch.stack([torch.randperm(6) for _ in range(4)])
    batch = _batch(
        logp.detach().gather(1, targets[:, None]).squeeze(1).tolist(),
        [0, 0, 1, 1],
        [0.7, -1.3],
        [2, 2],
        target_ids=targets.tolist(),
        topk_ids=topk.tolist(),
        topk_logprobs=logp.detach().gather(1, topk).tolist(),
    )
    target_lp, topk_lp = logp.gather(1, targets[:, None]).squeeze(1), logp.gather(1, topk)
    grads = []
    for sc, renorm in ((False, True), (True, True), (True, False)):
        cfg = ObjectiveConfig(score_centering=sc, score_centering_renormalize=renorm, loss_floor_tokens=1)
        loss, _ = policy_loss(target_lp, topk_lp if sc else None, batch, 0, cfg)
        grads.append(torch.autograd.grad(loss, logits, retain_graph=True)[0])
    torch.testing.assert_close(grads[1], grads[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(grads[2], grads[0], atol=1e-12, rtol=0)
    assert grads[0].abs().max() > 1e-3  # the comparison is not between two zero gradients


def test_sc_removes_drift_toward_a_stale_sampler_two_token_example():
    # Vocab {a, b}, logits (θ, 0) at θ = 0 → π = (.5, .5); stale sampler q = (.8, .2). Five one-token
    # attempts in q's proportions (4 × a, 1 × b), all with A = 1, so the true signal is zero.
    # Score ∇θ log π: a → 1 - π_a = .5, b → -π_a = -.5; expected under q: .8·.5 - .2·.5 = .3 = q_a - π_a
    # (drift toward q). Centred: a → .5 - (.8·.5 + .2·(-.5)) = .2, b → -.5 - .3 = -.8; expected 0.
    theta = torch.zeros((), dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(torch.stack([theta, torch.zeros((), dtype=torch.float64)]), -1)  # [2]
    targets = [0, 0, 0, 0, 1]
    q = [math.log(0.8), math.log(0.2)]
    target_lp, topk_lp = logp[targets], logp[[0, 1]].expand(5, 2)
    per_token = centered_score(
        target_lp, topk_lp, torch.tensor([q] * 5, dtype=torch.float64), renormalize=True
    )
    token_grads = [torch.autograd.grad(per_token[i], theta, retain_graph=True)[0].item() for i in (0, 4)]
    assert token_grads == pytest.approx([0.2, -0.8])
    batch = _batch(
        [q[t] for t in targets],
        [0, 1, 2, 3, 4],
        [1.0] * 5,
        [1] * 5,
        target_ids=targets,
        topk_ids=[[0, 1]] * 5,
        topk_logprobs=[q] * 5,
    )
    cfg_plain = ObjectiveConfig(**PLAIN)
    cfg_sc = ObjectiveConfig(**(PLAIN | {"score_centering": True}))
    (g_plain,) = torch.autograd.grad(
        policy_loss(target_lp, None, batch, 0, cfg_plain)[0], theta, retain_graph=True
    )
    (g_sc,) = torch.autograd.grad(policy_loss(target_lp, topk_lp, batch, 0, cfg_sc)[0], theta)
    # loss = -(1/5) Σ score: plain gradient -.3 (a descent step raises θ, π_a drifts toward q_a = .8); SC: 0
    assert g_plain.item() == pytest.approx(-0.3)
    assert g_sc.item() == pytest.approx(0.0, abs=1e-15)


def test_sc_renormalisation_and_padding():
    # log π(y) = -1, log π(S) = [-.5, -2]; q over S = [.6, .2]: renormalised [.75, .25] → g = -1 + .375 + .5;
    # raw → g = -1 + .3 + .4. Padded candidate (log q = -inf) weighs 0; an all-padded row is uncentered.
    policy = torch.tensor([-1.0, -1.0, -1.0])
    topk = torch.tensor([[-0.5, -2.0]] * 3)
    q = torch.tensor([[0.6, 0.2], [0.5, 0.0], [0.0, 0.0]]).log()
    torch.testing.assert_close(
        centered_score(policy, topk, q, renormalize=True), torch.tensor([-0.125, -0.5, -1.0])
    )
    torch.testing.assert_close(
        centered_score(policy, topk, q, renormalize=False), torch.tensor([-0.3, -0.75, -1.0])
    )


def test_tis_with_sc_weighs_each_candidate_by_its_own_ratio_hand_computed():
    # V = 3, logits θ = 0 → π = (1/3, 1/3, 1/3); sampler q = (.5, .3, .2), top-2 = {0, 1} plus a padded slot.
    # Ratios π/q = (.667, 1.111, 1.667), none clipped by [0.5, 2]; q̃ renormalised over the top-2 = (.625, .375)
    # (the candidates' ratios use q itself, not q̃). With ∇_θ log π(s) = e_s − π, the weighted centred score of
    #   y = 0: .667(e0 − π) − .625·.667(e0 − π) − .375·1.111(e1 − π) = ( .30556, −.36111,  .05556)
    #   y = 1: 1.111(e1 − π) − (same centering term)                  = (−.50926,  .60185, −.09259)
    #   y = 2: 1.667(e2 − π) − (same centering term)                  = (−.69444, −.69444, 1.38889)
    # and with A = 1 on a one-token attempt (floor 1) ∇loss = −(that).
    want = {
        0: [0.30555556, -0.36111111, 0.05555556],
        1: [-0.50925926, 0.60185185, -0.09259259],
        2: [-0.69444444, -0.69444444, 1.38888889],
    }
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64).log()
    topk_ids = torch.tensor([[0, 1, 0]])
    topk_logq = torch.tensor([[q[0].item(), q[1].item(), float("-inf")]], dtype=torch.float64)
    cfg = ObjectiveConfig(loss_floor_tokens=1, score_centering_topk=3)
    for y, score_grad in want.items():
        theta = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        logp = torch.log_softmax(theta, -1)
        batch = _batch([q[y].item()], [0], [1.0], [1], target_ids=[y], topk_ids=topk_ids.tolist(),
                       topk_logprobs=topk_logq.tolist())
        loss, _ = policy_loss(logp[y : y + 1], logp[topk_ids], batch, 0, cfg)
        (grad,) = torch.autograd.grad(loss, theta)
        torch.testing.assert_close(grad, -torch.tensor(score_grad, dtype=torch.float64), atol=1e-7, rtol=0)


def test_loss_floor_weighs_short_and_long_attempts():
    # 10-token attempt: denominator max(10, 2048) = 2048; 5,000-token attempt: 5,000. N = 2, A = 1, log π = -1:
    # loss = (1/2)(10/2048 + 5000/5000) = 0.50244140625; d loss / d log π_t = -1 / (2 · denominator)
    policy = torch.full((5010,), -1.0, dtype=torch.float64, requires_grad=True)
    batch = _batch([-1.0] * 5010, [0] * 10 + [1] * 5000, [1.0, 1.0], [10, 5000])
    cfg = ObjectiveConfig(tis=False, score_centering=False)
    loss, _ = policy_loss(policy, None, batch, 0, cfg)
    assert loss.item() == pytest.approx(0.50244140625, rel=1e-12)
    (grad,) = torch.autograd.grad(loss, policy)
    torch.testing.assert_close(grad[:10], torch.full((10,), -1 / 4096, dtype=torch.float64))
    torch.testing.assert_close(grad[10:], torch.full((5000,), -1 / 10000, dtype=torch.float64))


def test_stale_tokens_are_dropped_but_still_count_in_the_denominator():
    # trainer v10; versions [10, 9, 4, 3, 2] → staleness [0, 1, 6, 7, 8]; max 6 drops the last two.
    # One attempt of 5 tokens, floor 1, A = 2: kept tokens get -2/5 (not -2/3), dropped ones 0.
    # |log π - log q| = [.1, .2, .3, .4, .6] → buckets 0: .1, 1: .2, 4-6: .3, dropped: .5; no 2-3 token.
    rollout = [-1.0, -1.0, -1.0, -1.0, -1.0]
    policy = torch.tensor([-1.1, -0.8, -1.3, -0.6, -1.6], dtype=torch.float64, requires_grad=True)
    batch = _batch(rollout, [0] * 5, [2.0], [5], versions=[10, 9, 4, 3, 2])
    loss, m = policy_loss(policy, None, batch, 10, ObjectiveConfig(**PLAIN))
    (grad,) = torch.autograd.grad(loss, policy)
    torch.testing.assert_close(grad, torch.tensor([-0.4, -0.4, -0.4, 0.0, 0.0], dtype=torch.float64))
    assert m["stale/dropped_share"] == pytest.approx(0.4)
    drift = {k: v for k, v in m.items() if k.startswith("drift/")}
    assert drift == pytest.approx(
        {
            "drift/staleness_0": 0.1,
            "drift/staleness_1": 0.2,
            "drift/staleness_4-6": 0.3,
            "drift/staleness_dropped": 0.5,
        }
    )
    assert m["tokens/staleness_dropped"] == 2


def test_micro_batch_losses_sum_to_the_batch_loss():
    torch.manual_seed(1)
    policy = torch.randn(12, dtype=torch.float64) - 2
    batch = _batch(
        (policy + 0.1 * torch.randn(12, dtype=torch.float64)).tolist(),
        [0] * 5 + [1] * 4 + [2] * 3,
        [1.2, -0.4, -0.8],
        [5, 4, 3],
        versions=[3, 2, 1, 0, 3, 3, 3, 2, 1, 0, 0, 3],
    )
    cfg = ObjectiveConfig(score_centering=False, loss_floor_tokens=4, max_staleness=2)
    whole, _ = policy_loss(policy, None, batch, 3, cfg)
    halves = [PolicyBatch(*(f[sl] for f in batch[:6]), *batch[6:]) for sl in (slice(0, 7), slice(7, 12))]
    parts = [
        policy_loss(policy[sl], None, b, 3, cfg)[0] for sl, b in zip((slice(0, 7), slice(7, 12)), halves)
    ]
    torch.testing.assert_close(parts[0] + parts[1], whole)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"weight_version": torch.tensor([0, 5])},
            r"weight_version range \[0, 5\] must lie in \[0, trainer_version=3\]",
        ),
        ({"weight_version": torch.tensor([-1, 0])}, "pass only policy-sampled positions"),
        ({"attempt_index": torch.tensor([0, 1])}, r"attempt_index must lie in \[0, 1\)"),
        ({"rollout_logprobs": torch.tensor([float("nan"), -1.0])}, "rollout_logprobs has NaN"),
        ({"advantages": torch.tensor([1.0, 2.0])}, r"advantages \(2,\) and n_sampled_tokens \(1,\)"),
    ],
)
def test_bad_batches_are_named(change, message):
    batch = _batch([-1.0, -1.0], [0, 0], [1.0], [2])._replace(**change)
    with pytest.raises(ValueError, match=message):
        policy_loss(torch.tensor([-1.0, -1.0]), None, batch, 3, ObjectiveConfig(**PLAIN))


def test_score_centering_without_topk_logprobs_is_an_error():
    batch = _batch([-1.0], [0], [1.0], [1])
    for missing in (None, torch.zeros(1, 0)):
        with pytest.raises(ValueError, match="score_centering is on but there are no top-k log-probs"):
            policy_loss(torch.tensor([-1.0]), missing, batch, 0, ObjectiveConfig())
