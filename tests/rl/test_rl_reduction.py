"""The whole objective on a tiny causal LM: the reduction to plain GRPO, and the full recipe's wiring."""

import pytest
import torch

from fireflash.models import build_tiny_model
from fireflash.rl.advantages import group_advantages
from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.loss import PolicyBatch, policy_loss
from fireflash.rl.objective import objective_loss

pytestmark = pytest.mark.unit
VOCAB, PROMPT, LENGTHS = 60, 4, [7, 3, 11, 5]  # four attempts with 7, 3, 11, 5 sampled tokens
REWARDS, SOLVED = [1.0, 0.25, 0.0, 0.75], [True, False, False, False]


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(VOCAB, seed=3, hidden_size=32).double()


def _sequences():
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, VOCAB, (PROMPT + n,), generator=g) for n in LENGTHS]


def _packed_hidden(model, seqs):
    """[T, H] hidden states predicting every sampled token, attempts concatenated; [T] targets."""
    hidden = [model.model(s[None]).last_hidden_state[0, PROMPT - 1 : -1] for s in seqs]
    return torch.cat(hidden), torch.cat([s[PROMPT:] for s in seqs])


def _grads(model, loss):
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def _batch(targets, rollout_logprobs, topk_ids, topk_logprobs, versions, advantages):
    attempt = torch.repeat_interleave(torch.arange(len(LENGTHS)), torch.tensor(LENGTHS))
    return PolicyBatch(
        targets,
        rollout_logprobs,
        topk_ids,
        topk_logprobs,
        versions,
        attempt,
        advantages,
        torch.tensor(LENGTHS),
    )


def test_reduces_to_per_token_normalised_grpo(model):
    seqs = _sequences()
    rewards = torch.tensor(REWARDS, dtype=torch.float64)
    # plain GRPO, written out: A = (R - mean R) / std R (population), loss = mean_i (1/|o_i|) Σ_t -A_i log π(o_it)
    adv = (rewards - rewards.mean()) / rewards.std(unbiased=False)
    plain = 0.0
    for a, s in zip(adv, seqs):
        logp = torch.log_softmax(model(s[None]).logits[0, PROMPT - 1 : -1], -1).gather(1, s[PROMPT:, None])
        plain = plain + (-a * logp).sum() / (len(s) - PROMPT)
    want = _grads(model, plain / len(seqs))

    cfg = ObjectiveConfig(
        tis=False,
        score_centering=False,
        loss_floor_tokens=1,
        solve_reward=1.0,
        partial_reward_scale=1.0,
        length_bonus_max=0.0,
        logprob_chunk_tokens=5,
    )
    ours = group_advantages(rewards, torch.tensor(SOLVED), torch.tensor(LENGTHS), cfg)
    hidden, targets = _packed_hidden(model, seqs)
    t = targets.numel()
    batch = _batch(
        targets,
        torch.full((t,), -3.0),
        torch.zeros(t, 0, dtype=torch.long),
        torch.zeros(t, 0),
        torch.full((t,), 5),
        ours.advantages,
    )
    loss, _ = objective_loss(hidden, model.lm_head.weight, batch, trainer_version=5, temperature=1.0, cfg=cfg)
    for got, w in zip(_grads(model, loss), want):
        torch.testing.assert_close(got, w, atol=1e-6, rtol=0)


def _stale_sampler(model, hidden, temperature, seed=11):
    """log q over the vocabulary: the model's own distribution, perturbed (a sampler some versions behind)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        noise = 0.5 * torch.randn(hidden.shape[0], VOCAB, generator=g, dtype=hidden.dtype)
        return torch.log_softmax(model.lm_head(hidden) / temperature + noise, -1)


def test_chunked_objective_equals_the_naive_full_log_softmax_path(model):
    # TIS + renormalised top-4 SC (from 6 candidates) + floor 8 + staleness 1, temperature 0.8, chunks of 4:
    # objective_loss's chunked log-probs against policy_loss fed from one whole [T, V] log-softmax
    seqs, temperature = _sequences(), 0.8
    cfg = ObjectiveConfig(loss_floor_tokens=8, max_staleness=1, score_centering_topk=4, logprob_chunk_tokens=4)
    hidden, targets = _packed_hidden(model, seqs)
    stale_logp = _stale_sampler(model, hidden.detach(), temperature)
    t = targets.numel()
    topk_logprobs, topk_ids = stale_logp.topk(6, dim=-1)
    rollout = stale_logp.gather(1, targets[:, None]).squeeze(1)
    versions = torch.tensor([9, 8, 7] * (t // 3) + [9] * (t % 3))  # trainer at 9: every third token is dropped
    adv = torch.tensor([1.3, -0.2, -0.9, -0.2], dtype=torch.float64)
    batch = _batch(targets, rollout, topk_ids, topk_logprobs, versions, adv)
    loss, m = objective_loss(hidden, model.lm_head.weight, batch, trainer_version=9, temperature=temperature, cfg=cfg)
    got = _grads(model, loss)

    hidden, _ = _packed_hidden(model, seqs)
    logp = torch.log_softmax(model.lm_head(hidden) / temperature, -1)
    naive, naive_m = policy_loss(
        logp.gather(1, targets[:, None]).squeeze(1), logp.gather(1, topk_ids[:, :4]), batch, 9, cfg
    )
    torch.testing.assert_close(loss, naive, atol=1e-5, rtol=0)
    for a, b in zip(got, _grads(model, naive)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert any(float(g.abs().max()) > 1e-3 for g in got)  # not a comparison of two zero gradients
    assert m["stale/dropped_share"] == pytest.approx(float((versions < 8).sum()) / t)
    assert m["tis/clip_low_share"] == pytest.approx(naive_m["tis/clip_low_share"])
    assert m["entropy/mean"] == pytest.approx(-(logp.exp() * logp).sum(-1).mean().item())


def _expected_gradient_under_the_sampler(model, cfg, temperature=0.8):
    """E_{y~q}[∇_params loss] at one position, exactly: every token of the vocabulary is a one-token attempt
    with A = 1, top-k = the whole vocabulary; the loss is linear in A, so A_y = N·q(y) sums the q-weighted
    gradients (the floor aggregate divides by N)."""
    seq = _sequences()[0]
    hidden = model.model(seq[None]).last_hidden_state[0, PROMPT - 1 : PROMPT].expand(VOCAB, -1)
    log_q = _stale_sampler(model, hidden[:1].detach(), temperature)[0]
    topk_logprobs, topk_ids = log_q.topk(VOCAB)
    batch = PolicyBatch(
        target_ids=torch.arange(VOCAB),
        rollout_logprobs=log_q,
        topk_ids=topk_ids.expand(VOCAB, -1),
        topk_logprobs=topk_logprobs.expand(VOCAB, -1),
        weight_version=torch.full((VOCAB,), 2),
        attempt_index=torch.arange(VOCAB),
        advantages=VOCAB * log_q.exp(),
        n_sampled_tokens=torch.ones(VOCAB, dtype=torch.long),
    )
    loss, _ = objective_loss(hidden, model.lm_head.weight, batch, trainer_version=2, temperature=temperature, cfg=cfg)
    return max(float(g.abs().max()) for g in _grads(model, loss))


def test_the_default_objective_does_not_drift_through_the_model(model):
    # a constant advantage carries no signal: the default (TIS + SC) must not move the model in expectation
    # toward or away from the stale sampler; TIS alone does, through its clip
    common = {"loss_floor_tokens": 1, "score_centering_topk": VOCAB, "logprob_chunk_tokens": 7}
    assert _expected_gradient_under_the_sampler(model, ObjectiveConfig(**common)) <= 1e-9
    assert _expected_gradient_under_the_sampler(model, ObjectiveConfig(score_centering=False, **common)) > 1e-3
