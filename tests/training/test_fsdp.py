"""FSDP2 on 2 gloo processes: the same update as one process, gathered HF checkpoints, sharded checkpoints, resume.

One spawn (module fixture) runs every distributed scenario; the tests compare its results in this process. A
second spawn resumes its sharded checkpoint the way ``fireflash train --resume`` does on the Ray backend.
The all-stale step of test_stale_steps.py (issue 25) runs in the first spawn too: a spawn of 2 ranks costs
~25 s of process start-up, more than its scenario.
"""

import copy
import os
from functools import partial
from pathlib import Path

import pytest
import torch
from test_trainer import VOCAB, _groups, _trainer

from fireflash.models import build_tiny_model, build_tiny_tokenizer, load_policy
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.ray_actors import TrainerWorker, build_trainer
from fireflash.training.batch import AllTokensStale
from fireflash.training.checkpoint import resume_model_dir
from fireflash.training.config import TrainerConfig
from fireflash.training.fsdp import (
    FSDPTrainer,
    free_port,
    init_trainer_group,
    leave_trainer_group,
    spawn_ranks,
)

pytestmark = pytest.mark.unit
CFG = {"lr": 1e-2, "micro_batch_tokens": 15}  # three micro-batches: two on rank 0, one (plus a zero pass) on rank 1


OBJECTIVE = ObjectiveConfig(loss_floor_tokens=8)


def _fsdp(model, device, **kw):
    return FSDPTrainer(model, None, TrainerConfig(**CFG), OBJECTIVE, 1.0, device=device, **kw)


def _full_state(trainer):
    """(step, weight_version, full weights, full optimizer state keyed by parameter name); collective for FSDP."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    optimizer = get_optimizer_state_dict(trainer.model, trainer.optimizer, options=options)
    # copies: AdamW increments its 'step' tensors in place, and a later step would change what is held here
    return trainer.step, trainer.weight_version, copy.deepcopy(trainer.state_dict()), copy.deepcopy(optimizer)


def _ranks(rank, world_size, port, out):
    torch.set_num_threads(1)
    device = init_trainer_group(rank, world_size, "127.0.0.1", port, timeout_sec=60)
    first, second = _groups(build_tiny_model(VOCAB), seed=0), _groups(build_tiny_model(VOCAB), seed=2, version=1)
    result = {}

    trainer = _fsdp(build_tiny_model(VOCAB), device)
    result["metrics"] = trainer.train_step(first)
    result["step1"] = trainer.state_dict()
    result["path"] = trainer.save_checkpoint(out / "gathered", cursor={"task_index": 3})
    resumed = _fsdp(load_policy(str(result["path"])), device)
    result["cursor"] = resumed.restore(out / "gathered")
    result["version"] = resumed.weight_version
    trainer.train_step(second)
    resumed.train_step(second)
    result["gathered_pair"] = (trainer.state_dict(), resumed.state_dict())

    # with a tokenizer, so that --resume (second spawn) can build its trainer from the checkpoint as the job does
    sharded = FSDPTrainer(build_tiny_model(VOCAB), build_tiny_tokenizer(), TrainerConfig(**CFG), OBJECTIVE, 1.0,
                          device=device, sharded_checkpoints=True)
    sharded.train_step(first)
    sharded.save_checkpoint(out / "sharded", cursor={"task_index": 4})
    result["sharded_saved"] = _full_state(sharded)
    reloaded = _fsdp(build_tiny_model(VOCAB, seed=7), device, sharded_checkpoints=True)  # other weights
    result["sharded_cursor"] = reloaded.restore(out / "sharded")
    sharded.train_step(second)
    reloaded.train_step(second)
    result["sharded_pair"] = (sharded.state_dict(), reloaded.state_dict())
    result["sharded_uninterrupted"] = _full_state(sharded)
    if rank == 0:
        torch.save(result, out / "result.pt")
    _stale_step(rank, device, out)
    leave_trainer_group()


def _stale_step(rank, device, out):
    """A real step, then one whose every token is stale (issue 25): every rank must refuse it, changing nothing."""
    objective = ObjectiveConfig(loss_floor_tokens=8, max_staleness=0)  # version 0's turns are stale at version 1
    trainer = FSDPTrainer(build_tiny_model(VOCAB), None, TrainerConfig(**CFG), objective, 1.0, device=device)
    trainer.train_step(_groups(build_tiny_model(VOCAB), seed=1))
    before = (trainer.state_dict(), copy.deepcopy(trainer.optimizer.state_dict()["state"]))  # this rank's shard
    try:
        trainer.train_step(_groups(build_tiny_model(VOCAB), seed=2, version=0))
        raised = None
    except AllTokensStale as e:
        raised = str(e)
    after = (trainer.state_dict(), copy.deepcopy(trainer.optimizer.state_dict()["state"]))
    torch.save({"raised": raised, "before": before, "after": after, "progress": (trainer.step, trainer.weight_version)},
               out / f"stale-rank{rank}.pt")


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    spawn_ranks(_ranks, world_size=2, args=(out,), timeout_sec=90)
    return torch.load(out / "result.pt", weights_only=False) | {"out": out}


def _build(start_dir):
    """The trainer builder ``fireflash train`` hands the Ray trainer workers (job._train_ray), for ``start_dir``.

    share_prefix off: FSDP runs every row in full, and the one-process trainer must do the same arithmetic.
    """
    training = TrainerConfig(**CFG, sharded_checkpoints=True, share_prefix=False)
    return partial(build_trainer, model_dir=str(start_dir), tokenizer_dir=str(start_dir), training=training,
                   objective=OBJECTIVE, temperature=1.0, cache_dir=None)


def _resume_ranks(rank, world_size, port, root, start_dir, out):
    # what --resume runs per trainer worker: TrainerWorker.setup builds the FSDP trainer from start_dir, then
    # RayRuntime._start calls restore on every rank
    worker = TrainerWorker(_build(start_dir), rank, world_size, num_cpus=1)
    worker.setup("127.0.0.1", port)
    result = {"cursor": worker.restore(str(root)), "restored": _full_state(worker.trainer)}
    worker.train_step(_groups(build_tiny_model(VOCAB), seed=2, version=1))
    result["after"] = _full_state(worker.trainer)
    if rank == 0:
        torch.save(result, out / "resumed.pt")
    leave_trainer_group()


@pytest.fixture(scope="module")
def sharded_resume(fsdp_run):
    """Resume the first spawn's sharded checkpoint (step 1) as ``fireflash train --resume`` does with two trainer
    workers: the driver picks the start directory (job._train), the ranks build and restore."""
    root = fsdp_run["out"] / "sharded"
    start_dir = resume_model_dir(root)
    spawn_ranks(_resume_ranks, world_size=2, args=(root, start_dir, fsdp_run["out"]), timeout_sec=90)
    return start_dir, torch.load(fsdp_run["out"] / "resumed.pt", weights_only=False)


def test_one_step_matches_the_single_process_trainer(fsdp_run):
    base = build_tiny_model(VOCAB)
    # FSDPTrainer runs every row in full (fsdp.py: pack); the same arithmetic keeps rounding equal (below)
    single = _trainer(copy.deepcopy(base), **CFG, share_prefix=False)
    threads = torch.get_num_threads()
    # the ranks ran on 1 thread: the same matmul blocking keeps rounding equal, which matters because Adam's
    # first step, lr * g / (|g| + eps), turns 1e-11 noise on near-zero gradients into 1e-5 weight changes
    torch.set_num_threads(1)
    try:
        expected = single.train_step(_groups(base, seed=0))
    finally:
        torch.set_num_threads(threads)
    got = fsdp_run["step1"]
    moved = max((single.model.state_dict()[k] - base.state_dict()[k]).abs().max().item() for k in got)
    assert moved > 1e-3  # the step changed the weights, so agreement below is not vacuous
    assert set(got) >= {k for k in single.model.state_dict() if k != "lm_head.weight"}
    for name, value in got.items():
        torch.testing.assert_close(value, single.model.state_dict()[name], atol=1e-5, rtol=0, msg=name)
    metrics = fsdp_run["metrics"]
    assert metrics["micro_batches"] == expected["micro_batches"] == 3
    for key in ("loss", "tokens/n", "grad_norm", "entropy/mean", "drift/staleness_0"):
        assert metrics[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-6), key


def test_gathered_checkpoint_is_an_hf_directory_and_resumes_exactly(fsdp_run):
    path = fsdp_run["path"]
    assert (path / "model.safetensors").is_file() and (path / "trainer_state.pt").is_file()
    assert (path.parent / "latest").read_text() == path.name
    loaded = load_policy(str(path)).state_dict()
    for name, value in fsdp_run["step1"].items():
        torch.testing.assert_close(loaded[name], value, atol=0, rtol=0, msg=name)
    assert fsdp_run["cursor"] == {"task_index": 3} and fsdp_run["version"] == 1
    a, b = fsdp_run["gathered_pair"]
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=0, msg=name)


def test_sharded_checkpoint_restores_weights_and_optimizer(fsdp_run):
    assert fsdp_run["sharded_cursor"] == {"task_index": 4}
    a, b = fsdp_run["sharded_pair"]
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=0, msg=name)


def test_an_all_stale_step_is_skipped_by_every_fsdp_rank(fsdp_run):
    for rank in (0, 1):
        result = torch.load(fsdp_run["out"] / f"stale-rank{rank}.pt", weights_only=False)
        assert result["raised"] and "rl.max_staleness=0" in result["raised"], rank
        assert result["progress"] == (1, 1)
        (weights_before, optimizer_before), (weights_after, optimizer_after) = result["before"], result["after"]
        assert weights_before.keys() == weights_after.keys()
        for k, v in weights_after.items():
            assert torch.equal(weights_before[k], v), (rank, k)
        assert optimizer_before.keys() == optimizer_after.keys() and optimizer_before
        for i, s in optimizer_before.items():  # DTensor shards: compare this rank's local part
            for key, value in s.items():
                a = value.to_local() if hasattr(value, "to_local") else value
                b = optimizer_after[i][key]
                assert torch.equal(a, b.to_local() if hasattr(b, "to_local") else b), (rank, i, key)


def test_needs_a_process_group():
    with pytest.raises(RuntimeError, match="init_trainer_group"):
        _fsdp(build_tiny_model(VOCAB), torch.device("cpu"))



def _assert_same_state(got, expected, atol=0.0):
    """Equal (step, version, weights, optimizer state) as ``_full_state`` returns them; exact by default."""
    assert got[:2] == expected[:2]
    for name, value in expected[2].items():
        torch.testing.assert_close(got[2][name], value, atol=atol, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
    assert set(got[3]["state"]) == set(expected[3]["state"]) and expected[3]["state"]
    for name, state in expected[3]["state"].items():
        for key, value in state.items():
            torch.testing.assert_close(got[3]["state"][name][key], value, atol=atol, rtol=0, msg=lambda m, n=f"{name}.{key}": f"{n}: {m}")


def test_resume_from_a_sharded_checkpoint_continues_exactly(fsdp_run, sharded_resume):
    start_dir, resumed = sharded_resume
    step, version, saved_weights, _ = fsdp_run["sharded_saved"]
    assert (step, version) == (1, 1) and resumed["cursor"] == {"task_index": 4}
    # the engines start from start_dir: an HF directory holding the checkpoint's weights and tokenizer
    assert start_dir == fsdp_run["out"] / "sharded" / "step-000001" / "hf"
    engine_weights = load_policy(str(start_dir)).state_dict()
    for name, value in saved_weights.items():
        torch.testing.assert_close(engine_weights[name], value, atol=0, rtol=0, msg=name)
    assert (start_dir / "tokenizer.json").is_file()
    _assert_same_state(resumed["restored"], fsdp_run["sharded_saved"])
    # the step after resume is the step the uninterrupted run took: weights, AdamW moments, step, version
    assert resumed["after"][:2] == (2, 2)
    _assert_same_state(resumed["after"], fsdp_run["sharded_uninterrupted"])


def test_a_single_trainer_resumes_a_sharded_checkpoint(fsdp_run, sharded_resume):
    """--resume with one trainer worker (or the local backend) after a run with two: the plain ``Trainer``
    reads the shards without a process group."""
    start_dir, _ = sharded_resume
    trainer = _build(start_dir)(0, 1)
    assert type(trainer).__name__ == "Trainer"
    assert trainer.restore(fsdp_run["out"] / "sharded") == {"task_index": 4}
    _assert_same_state(_full_state(trainer), fsdp_run["sharded_saved"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer.train_step(_groups(build_tiny_model(VOCAB), seed=2, version=1))
    finally:
        torch.set_num_threads(threads)
    # one process sums the micro-batches' gradients in another order than two ranks do
    _assert_same_state(_full_state(trainer), fsdp_run["sharded_uninterrupted"], atol=1e-5)


class _Killed(BaseException):
    """A simulated kill -9 of the writer."""


def test_a_kill_while_the_sharded_writer_replaces_a_step_keeps_a_complete_checkpoint(tmp_path, monkeypatch):
    """The sharded writer shares the single-process writer's commit (test_checkpoint.py covers every kill point):
    killed as it renames the new step-N into place, ``latest`` still restores the old step-N whole."""
    device = init_trainer_group(0, 1, "127.0.0.1", free_port(), timeout_sec=30)  # one rank, in this process
    try:
        root = tmp_path / "sharded"
        trainer = _fsdp(build_tiny_model(VOCAB), device, sharded_checkpoints=True)
        trainer.train_step(_groups(build_tiny_model(VOCAB), seed=0))
        trainer.save_checkpoint(root, cursor={"v": "old"})
        old = copy.deepcopy(trainer.state_dict())  # at one rank it may alias the live parameters
        trainer.train_step(_groups(build_tiny_model(VOCAB), seed=2, version=1))
        trainer.step = 1  # a resumed run saving the step a killed run had saved
        real_replace = os.replace

        def replace(src, dst, **kwargs):
            if Path(dst) == root / "step-000001":
                raise _Killed(f"rename {src} -> {dst}")
            return real_replace(src, dst, **kwargs)

        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(_Killed):
            trainer.save_checkpoint(root, cursor={"v": "new"})
        monkeypatch.undo()
        restored = _fsdp(build_tiny_model(VOCAB, seed=7), device, sharded_checkpoints=True)
        assert restored.restore(root) == {"v": "old"} and restored.weight_version == 1
        for name, value in old.items():
            torch.testing.assert_close(restored.state_dict()[name], value, atol=0, rtol=0, msg=name)
    finally:
        leave_trainer_group()
