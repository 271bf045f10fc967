"""The trainer on a tiny random model: updates, micro-batch invariance, staleness masking, exact resume."""

import copy

import pytest
import torch

from fireflash.models import build_tiny_model, load_policy
from fireflash.protocols import Group, Score, Segment, Trajectory
from fireflash.rl.config import ObjectiveConfig
from fireflash.training.batch import BatchError, pack_groups
from fireflash.training.checkpoint import CheckpointError
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer

pytestmark = pytest.mark.unit
VOCAB, K = 97, 4


def _segment(model, gen, n_prompt, n_sampled, version):
    """A segment whose sampled tokens and rollout log-probs come from ``model`` itself (ratio 1)."""
    ids = torch.randint(3, VOCAB, (n_prompt + n_sampled,), generator=gen)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids[None]).logits[0].float(), -1)  # row t predicts t+1
    mask = [0] * n_prompt + [1] * n_sampled
    lps, tk_ids, tk_lps = [], [], []
    for t, m in enumerate(mask):
        if m:
            top = logp[t - 1].topk(K)
            lps.append(logp[t - 1, ids[t]].item())
            tk_ids.append(top.indices.tolist())
            tk_lps.append(top.values.tolist())
        else:
            lps.append(0.0), tk_ids.append([]), tk_lps.append([])
    return Segment(token_ids=ids.tolist(), loss_mask=mask, rollout_logprobs=lps, topk_ids=tk_ids,
                   topk_logprobs=tk_lps, weight_version=[version if m else -1 for m in mask])


def _groups(model, seed=0, version=0, lengths=((5, 7), (9, 3), (4, 11))):
    gen = torch.Generator().manual_seed(seed)
    trajs = [Trajectory(task_id="t", attempt_id=f"t/{i}", segments=[_segment(model, gen, p, s, version) for p, s in [pl]])
             for i, pl in enumerate(lengths)]
    scores = [Score(reward=r, solved=r == 1.0) for r in (1.0, 0.0, 0.4)]
    return [Group(task_id="t", trajectories=trajs, scores=scores, advantages=[1.2, -0.9, -0.3])]


def _trainer(model, **cfg):
    cfg = {"lr": 1e-2, "micro_batch_tokens": 64} | cfg
    return Trainer(model, None, TrainerConfig(**cfg), ObjectiveConfig(loss_floor_tokens=8), temperature=1.0)


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_step_updates_weights_and_version():
    model = build_tiny_model(VOCAB)
    before = _params(model)
    trainer = _trainer(model)
    metrics = trainer.train_step(_groups(model))
    assert trainer.weight_version == 1 and trainer.step == 1
    assert metrics["tokens/n"] == 21 and metrics["grad_norm"] > 0
    assert any(not torch.equal(before[k], v) for k, v in _params(model).items())
    assert metrics["stale/dropped_share"] == 0.0


def test_micro_batching_does_not_change_the_gradient():
    base = build_tiny_model(VOCAB)
    groups = _groups(base)
    one, many = _trainer(copy.deepcopy(base), micro_batch_tokens=1024), _trainer(copy.deepcopy(base), micro_batch_tokens=15)
    m_one, m_many = one.accumulate_gradients(groups), many.accumulate_gradients(groups)
    assert m_one["micro_batches"] == 1 and m_many["micro_batches"] == 3
    assert m_one["loss"] == pytest.approx(m_many["loss"], abs=1e-6)
    for (name, a), b in zip(one.model.named_parameters(), many.model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=0, msg=name)


def test_turns_beyond_max_staleness_get_no_gradient():
    model = build_tiny_model(VOCAB)
    trainer = _trainer(model)
    trainer.weight_version = 10  # the data was sampled at version 3: 7 > 6 versions behind
    before = _params(model)
    metrics = trainer.train_step(_groups(model, version=3))
    assert metrics["stale/dropped_share"] == 1.0 and metrics["grad_norm"] == 0.0
    for k, v in _params(model).items():
        assert torch.equal(before[k], v), k


def test_segment_over_budget_is_rejected_up_front():
    model = build_tiny_model(VOCAB)
    with pytest.raises(BatchError, match="exceeds training.micro_batch_tokens=8"):
        pack_groups(_groups(model), micro_batch_tokens=8, topk=K, pad_id=0)
    with pytest.raises(BatchError, match="no advantages"):
        groups = _groups(model)
        pack_groups([groups[0].model_copy(update={"advantages": None})], 64, K, 0)


def test_checkpoint_resume_continues_exactly(tmp_path):
    model = build_tiny_model(VOCAB)
    trainer = _trainer(model)
    trainer.train_step(_groups(model, seed=1))
    path = trainer.save_checkpoint(tmp_path, cursor={"task_index": 5})
    assert (path / "model.safetensors").is_file() and (tmp_path / "latest").read_text() == path.name

    resumed = _trainer(load_policy(str(path)))
    assert resumed.restore(tmp_path) == {"task_index": 5}
    assert (resumed.step, resumed.weight_version) == (1, 1)
    next_groups = _groups(model, seed=2, version=1)
    trainer.train_step(next_groups)
    resumed.train_step(next_groups)
    for k, v in _params(trainer.model).items():
        torch.testing.assert_close(_params(resumed.model)[k], v, atol=1e-6, rtol=0)


def test_keeps_only_recent_checkpoints_and_resume_without_one_fails(tmp_path):
    model = build_tiny_model(VOCAB)
    trainer = _trainer(model, keep_checkpoints=2)
    for _ in range(3):
        trainer.train_step(_groups(model))
        trainer.save_checkpoint(tmp_path, cursor={})
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000002", "step-000003"]
    with pytest.raises(CheckpointError, match="no checkpoint under"):
        _trainer(model).restore(tmp_path / "empty")
