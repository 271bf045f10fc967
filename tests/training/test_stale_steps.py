"""A step whose every sampled token is stale changes nothing: no optimizer step, no new version (issue 25, item 3).

The loss masks tokens more than ``max_staleness`` versions behind, so such a step has no gradient; AdamW would
still move the weights by its momentum and the version would go up. Both trainers refuse it before any state
changes (``AllTokensStale``, a ``NoSampledTokens``); on FSDP2 every rank refuses it
(test_fsdp.py's ``test_an_all_stale_step_is_skipped_by_every_fsdp_rank``, in that file's shared spawn).
"""

import copy

import pytest
import torch
from test_trainer import VOCAB, _groups, _params

from fireflash.models import build_tiny_model
from fireflash.rl.config import ObjectiveConfig
from fireflash.training.batch import AllTokensStale, NoSampledTokens, count_fresh_tokens
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer

pytestmark = pytest.mark.unit
CFG = {"lr": 1e-2, "micro_batch_tokens": 15}
OBJECTIVE = ObjectiveConfig(loss_floor_tokens=8, max_staleness=0)  # version 0's turns are stale once at version 1


def _optimizer_state(trainer):
    return copy.deepcopy(trainer.optimizer.state_dict()["state"])


def _assert_same_state(state_a, state_b):
    assert state_a.keys() == state_b.keys() and state_a
    for i, s in state_a.items():
        for key, value in s.items():
            assert torch.equal(value, state_b[i][key]), (i, key)


def test_count_fresh_tokens_measures_staleness_as_the_loss_does():
    model = build_tiny_model(VOCAB)
    groups = _groups(model, version=2)  # 21 sampled positions after each segment's first token
    assert count_fresh_tokens(groups, trainer_version=2, max_staleness=0) == (21, 21)
    assert count_fresh_tokens(groups, trainer_version=8, max_staleness=6) == (21, 21)
    assert count_fresh_tokens(groups, trainer_version=9, max_staleness=6) == (21, 0)


def test_an_all_stale_step_changes_no_weight_no_optimizer_state_and_no_version():
    model = build_tiny_model(VOCAB)
    trainer = Trainer(model, None, TrainerConfig(**CFG), OBJECTIVE, temperature=1.0)
    trainer.train_step(_groups(model, seed=1))  # AdamW has momentum from a real step; version 1
    weights, optimizer = _params(model), _optimizer_state(trainer)

    with pytest.raises(AllTokensStale, match="rl.max_staleness=0"):
        trainer.train_step(_groups(model, seed=2, version=0))  # every token 1 version behind

    assert (trainer.step, trainer.weight_version) == (1, 1)
    for k, v in _params(model).items():
        assert torch.equal(weights[k], v), k
    _assert_same_state(optimizer, _optimizer_state(trainer))
    assert all(p.grad is None for p in model.parameters())
    assert issubclass(AllTokensStale, NoSampledTokens)  # the runtimes count both as a skipped step
    # one fresh group among stale ones is enough to step
    trainer.train_step(_groups(model, seed=2, version=0) + _groups(model, seed=3, version=1))
    assert (trainer.step, trainer.weight_version) == (2, 2)
