"""Shared-prefix micro-batches: the same loss and gradient as running every row in full, fewer tokens."""

import copy

import pytest
import torch

from fireflash.models import build_tiny_model
from fireflash.protocols import Group, Score, Segment, Trajectory
from fireflash.rl.config import ObjectiveConfig
from fireflash.training.batch import pack_groups
from fireflash.training.config import TrainerConfig
from fireflash.training.prefix import common_prefix_len
from fireflash.training.trainer import Trainer

pytestmark = pytest.mark.unit
VOCAB, K = 97, 4


def _segment(model, prompt, sampled, version=0):
    """``prompt`` then ``sampled`` tokens, with the model's own log-probs as the rollout's (ratio 1)."""
    ids = torch.tensor(prompt + sampled)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids[None]).logits[0].float(), -1)
    mask = [0] * len(prompt) + [1] * len(sampled)
    lps, tk_ids, tk_lps = [], [], []
    for t, m in enumerate(mask):
        top = logp[t - 1].topk(K)
        lps.append(logp[t - 1, ids[t]].item() if m else 0.0)
        tk_ids.append(top.indices.tolist() if m else [])
        tk_lps.append(top.values.tolist() if m else [])
    return Segment(token_ids=ids.tolist(), loss_mask=mask, rollout_logprobs=lps, topk_ids=tk_ids,
                   topk_logprobs=tk_lps, weight_version=[version if m else -1 for m in mask])


def _groups(model, seed=0):
    """Two GRPO groups: one system prompt, two task turns, attempts of different lengths."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(3, VOCAB, (n,), generator=gen).tolist()  # noqa: E731
    system = rand(12)
    groups = []
    for g, task in enumerate((rand(5), rand(8))):
        trajs = [Trajectory(task_id=f"t{g}", attempt_id=f"t{g}/{i}", segments=[_segment(model, system + task, rand(n))])
                 for i, n in enumerate((3, 7, 5))]
        scores = [Score(reward=r, solved=r == 1.0) for r in (1.0, 0.0, 0.5)]
        groups.append(Group(task_id=f"t{g}", trajectories=trajs, scores=scores, advantages=[1.1, -0.8, -0.3]))
    return groups, len(system)


def _trainer(model, **cfg):
    cfg = {"lr": 1e-2, "micro_batch_tokens": 1024} | cfg
    return Trainer(model, None, TrainerConfig(**cfg), ObjectiveConfig(loss_floor_tokens=8), temperature=1.0)


def test_common_prefix_len():
    assert common_prefix_len([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_len([[5], [6]]) == 0 and common_prefix_len([]) == 0


def test_packing_puts_a_groups_attempts_together_behind_their_prompt():
    model = build_tiny_model(VOCAB)
    groups, n_system = _groups(model)
    one = pack_groups(groups, 1024, K, 0)
    assert len(one) == 1 and one[0].prefix_ids.numel() == n_system  # two task turns: only the system prompt is common
    # a budget that fits one group at a time: each micro-batch shares system prompt + task turn
    per_group = pack_groups(groups, 45, K, 0)
    assert sorted(mb.prefix_ids.numel() for mb in per_group) == [n_system + 5 - 1, n_system + 8 - 1]
    assert all(mb.input_ids.shape[0] == 3 for mb in per_group)
    assert sum(mb.policy.target_ids.numel() for mb in per_group) == 2 * (3 + 7 + 5)
    assert all(mb.prefix_ids.numel() == 0 for mb in pack_groups(groups, 1024, K, 0, share_prefix=False))


@pytest.mark.parametrize("budget", [1024, 45, 28])
def test_shared_prefix_gives_the_full_gradient(budget):
    base = build_tiny_model(VOCAB)
    groups, _ = _groups(base)
    shared = _trainer(copy.deepcopy(base), micro_batch_tokens=budget)
    full = _trainer(copy.deepcopy(base), micro_batch_tokens=budget, share_prefix=False)
    m_shared, m_full = shared.accumulate_gradients(groups), full.accumulate_gradients(groups)
    assert m_shared["loss"] == pytest.approx(m_full["loss"], abs=1e-6)
    assert m_shared["entropy/mean"] == pytest.approx(m_full["entropy/mean"], abs=1e-5)
    for (name, a), b in zip(shared.model.named_parameters(), full.model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5, msg=name)
