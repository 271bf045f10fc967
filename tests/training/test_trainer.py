"""The trainer on a tiny random model: updates, micro-batch invariance, staleness masking, exact resume,
precision (training.dtype) and steps without sampled tokens."""

import copy

import pytest
import torch

from fireflash.models import build_tiny_model, load_policy
from fireflash.protocols import Group, Score, Segment, Trajectory
from fireflash.rl.config import ObjectiveConfig
from fireflash.training.batch import BatchError, NoSampledTokens, pack_groups
from fireflash.training.checkpoint import CheckpointError
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer, default_device

pytestmark = pytest.mark.unit
VOCAB, K = 97, 4


def _segment(model, gen, n_prompt, n_sampled, version, prompt=None):
    """A segment whose sampled tokens and rollout log-probs come from ``model`` itself (ratio 1); ``prompt``
    ([n] ids) opens it when given, before ``n_prompt`` more prompt tokens."""
    ids = torch.randint(3, VOCAB, (n_prompt + n_sampled,), generator=gen)
    if prompt is not None:
        ids, n_prompt = torch.cat([prompt, ids]), n_prompt + len(prompt)
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


def _groups(model, seed=0, version=0, lengths=((5, 7), (9, 3), (4, 11)), shared_prompt=0):
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, VOCAB, (shared_prompt,), generator=gen) if shared_prompt else None
    trajs = [Trajectory(task_id="t", attempt_id=f"t/{i}", segments=[_segment(model, gen, p, s, version, prompt) for p, s in [pl]])
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


def test_metrics_per_staleness_bucket_do_not_depend_on_micro_batching():
    """Bucket token counts add up and bucket drift is a mean over the bucket's tokens, however a step is split."""
    base = build_tiny_model(VOCAB)
    [group] = _groups(base)
    # the attempts were sampled 0, 1 and 3 versions before the trainer's version 3: three buckets
    for traj, version in zip(group.trajectories, (3, 2, 0)):
        seg = traj.segments[0]
        seg.weight_version = [version if m else -1 for m in seg.loss_mask]
        seg.rollout_logprobs = [lp - 0.1 * (3 - version) if m else lp for lp, m in zip(seg.rollout_logprobs, seg.loss_mask)]
    runs = {}
    for budget in (1024, 15):
        trainer = _trainer(copy.deepcopy(base), micro_batch_tokens=budget)
        trainer.weight_version = 3
        runs[budget] = trainer.accumulate_gradients([group])
    one, many = runs[1024], runs[15]
    assert one["micro_batches"] == 1 and many["micro_batches"] == 3
    assert (one["tokens/staleness_0"], one["tokens/staleness_1"], one["tokens/staleness_2-3"]) == (7.0, 3.0, 11.0)
    assert one["drift/staleness_2-3"] == pytest.approx(0.3, abs=1e-5)  # ratio 1 shifted by 0.1 nats per version
    assert one.keys() == many.keys()
    for key, value in one.items():
        if key != "micro_batches":
            assert many[key] == pytest.approx(value, abs=1e-6), key


def test_turns_beyond_max_staleness_get_no_gradient():
    model = build_tiny_model(VOCAB)
    trainer = _trainer(model)
    trainer.weight_version = 10  # the data was sampled at version 3: 7 > 6 versions behind
    # the gradient only: a whole step of stale turns is refused before it (test_stale_steps.py)
    metrics = trainer.accumulate_gradients(_groups(model, version=3))
    assert metrics["stale/dropped_share"] == 1.0
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


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


def _record_compute_dtype(model):
    """dtypes of the first layer's query projection's output (a matmul), one per forward pass of ``model``."""
    seen = []
    model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    return seen


def test_default_precision_on_cpu_is_fp32():
    model = build_tiny_model(VOCAB)
    seen = _record_compute_dtype(model)
    trainer = _trainer(model)  # training.dtype = 'auto'
    assert trainer.device.type == "cpu" and trainer.compute_dtype is None
    trainer.train_step(_groups(model))
    assert seen and set(seen) == {torch.float32}
    assert {p.dtype for p in model.parameters()} == {torch.float32}


@pytest.mark.parametrize("shared_prompt", [0, 6])
def test_bfloat16_asked_for_on_cpu_computes_in_bf16_and_keeps_fp32_master_weights(shared_prompt):
    """training.dtype = 'bfloat16' is honoured on CPU (slow there, so never the default): the body and the LM
    head run in bf16 under autocast, with or without a shared prefix; the weights and AdamW state stay fp32,
    so an update too small for bf16 weights still lands."""
    model = build_tiny_model(VOCAB)
    groups = _groups(model, shared_prompt=shared_prompt)
    seen = _record_compute_dtype(model)
    before = _params(model)
    trainer = _trainer(model, dtype="bfloat16", lr=1e-6)
    assert trainer.compute_dtype == torch.bfloat16
    mb = trainer.pack(groups)
    assert bool(mb[0].prefix_ids.numel()) == bool(shared_prompt)
    metrics = trainer.train_step(groups)
    assert seen and set(seen) == {torch.bfloat16}
    assert metrics["grad_norm"] > 0 and torch.isfinite(torch.tensor(metrics["loss"]))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert all(s["exp_avg"].dtype == torch.float32 for s in trainer.optimizer.state.values())
    # lr 1e-6 moves weights of ~0.02 by far less than a bf16 ulp (~1e-4): only fp32 master weights change
    assert any(not torch.equal(before[k], v) for k, v in _params(model).items())
    # the bf16 loss tracks the fp32 one (the log-probs themselves are fp32)
    reference = _trainer(build_tiny_model(VOCAB))
    assert metrics["loss"] == pytest.approx(reference.accumulate_gradients(groups)["loss"], rel=0.05, abs=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_auto_trains_in_bf16_with_fp32_weights_and_hands_out_cpu_weights(tmp_path):
    model = build_tiny_model(VOCAB)
    groups = _groups(model, shared_prompt=6)
    seen = _record_compute_dtype(model)
    trainer = Trainer(model, None, TrainerConfig(lr=1e-2, micro_batch_tokens=64), ObjectiveConfig(loss_floor_tokens=8),
                      temperature=1.0, device=default_device())
    assert trainer.device.type == "cuda" and trainer.compute_dtype == torch.bfloat16
    metrics = trainer.train_step(groups)
    assert set(seen) == {torch.bfloat16} and metrics["grad_norm"] > 0 and trainer.weight_version == 1
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cuda", torch.float32)}
    assert {v.device.type for v in trainer.state_dict().values()} == {"cpu"}
    path = trainer.save_checkpoint(tmp_path, cursor={})
    resumed = Trainer(load_policy(str(path)), None, TrainerConfig(lr=1e-2, micro_batch_tokens=64),
                      ObjectiveConfig(loss_floor_tokens=8), temperature=1.0, device=default_device())
    assert resumed.restore(tmp_path) == {} and resumed.weight_version == 1
    resumed.train_step(_groups(model, seed=1, version=1))


def _unsampled(groups):
    """``groups`` with every token's loss mask 0 (e.g. attempts cut off before their first sampled token)."""
    out = []
    for g in groups:
        trajs = [t.model_copy(update={"segments": [s.model_copy(update={"loss_mask": [0] * len(s.loss_mask)})
                                                   for s in t.segments]}) for t in g.trajectories]
        out.append(g.model_copy(update={"trajectories": trajs}))
    return out


def test_a_step_without_sampled_tokens_is_refused_and_changes_nothing():
    """No sampled token, no gradient: an optimizer step would change no weight but still bump the version,
    which ages every turn in flight by one version (staleness masking) and pushes the same weights again."""
    model = build_tiny_model(VOCAB)
    trainer = _trainer(model)
    trainer.train_step(_groups(model, seed=1))  # AdamW has state (momentum) from a real step
    before, optimizer_before = _params(model), copy.deepcopy(trainer.optimizer.state_dict())
    with pytest.raises(NoSampledTokens, match="no policy-sampled token"):
        trainer.train_step(_unsampled(_groups(model, version=1)))
    assert (trainer.step, trainer.weight_version) == (1, 1)
    for k, v in _params(model).items():
        assert torch.equal(before[k], v), k
    assert all(p.grad is None for p in model.parameters()) and not model.training
    after = trainer.optimizer.state_dict()["state"]
    assert all(torch.equal(after[i]["step"], s["step"]) for i, s in optimizer_before["state"].items())
    # one group with tokens is enough to train
    trainer.train_step(_unsampled(_groups(model, version=1)) + _groups(model, seed=2, version=1))
    assert (trainer.step, trainer.weight_version) == (2, 2)
