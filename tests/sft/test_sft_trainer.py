"""The SFT trainer on a tiny random Llama: exact forward with shared prefixes, exact loss, it learns."""

from __future__ import annotations

import pytest
import torch

from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.cli.sft import schedule
from fireflash.sft.config import SFTConfig
from fireflash.sft.data import Example, make_micro_batch
from fireflash.sft.trainer import SFTTrainer, hidden_states, lr_factor


@pytest.fixture()
def setup():
    tok = build_tiny_tokenizer()
    model = build_tiny_model(len(tok), seed=0)
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(5, len(tok), (12,), generator=g).tolist()
    rows = []
    for i in range(3):
        tail = torch.randint(5, len(tok), (6 + 2 * i,), generator=g).tolist()
        ids = prefix + tail
        mask = [0] * (len(prefix) + 2) + [1] * (len(tail) - 2)
        rows.append(Example(tuple(ids), tuple(mask), f"r{i}"))
    return tok, model, rows


def test_shared_prefix_forward_equals_the_full_forward(setup):
    _, model, rows = setup
    shared, full = make_micro_batch(rows, 0, True), make_micro_batch(rows, 0, False)
    p = shared.prefix_ids.numel()
    assert p == 12  # the 12 common tokens (the first label sits two tokens later)
    with torch.no_grad():
        h_shared, h_full = hidden_states(model, shared), hidden_states(model, full)
    for b, e in enumerate(rows):
        n = len(e.token_ids) - p
        torch.testing.assert_close(h_shared[b, :n], h_full[b, p: p + n], atol=1e-5, rtol=1e-5)


def test_loss_is_token_mean_cross_entropy_on_the_mask(setup):
    tok, model, rows = setup
    trainer = SFTTrainer(model, tok, SFTConfig(share_prefix=False, lr=1e-9, warmup_steps=0), total_steps=1)
    expected_num, n = 0.0, 0
    with torch.no_grad():
        for e in rows:
            logits = model(torch.tensor([e.token_ids])).logits[0]
            for t in range(1, len(e.token_ids)):
                if e.loss_mask[t]:
                    expected_num += float(torch.nn.functional.cross_entropy(logits[t - 1], torch.tensor(e.token_ids[t])))
                    n += 1
    metrics = trainer.step(rows)
    assert metrics["tokens/loss"] == n
    assert metrics["loss"] == pytest.approx(expected_num / n, rel=1e-5)


def test_a_few_steps_fit_the_batch(setup):
    tok, model, rows = setup
    trainer = SFTTrainer(model, tok, SFTConfig(lr=3e-3, warmup_steps=0), total_steps=30)
    first = trainer.step(rows)
    for _ in range(25):
        last = trainer.step(rows)
    assert last["loss"] < 0.5 * first["loss"] and last["accuracy"] > first["accuracy"]


def test_no_loss_tokens_is_an_error(setup):
    tok, model, rows = setup
    empty = [Example(e.token_ids, (0,) * len(e.token_ids), e.source) for e in rows]
    with pytest.raises(ValueError, match="no assistant tokens"):
        SFTTrainer(model, tok, SFTConfig(), total_steps=1).step(empty)


def test_schedule_and_lr():
    steps = schedule(10, 4, 1.5, seed=0)
    flat = [i for s in steps for i in s]
    assert len(flat) == 15 and sorted(flat[:10]) == list(range(10)) and len(steps) == 4
    assert schedule(10, 4, 1.0, seed=0) == schedule(10, 4, 1.0, seed=0)
    assert lr_factor(0, 2, 10) == 0.5 and lr_factor(2, 2, 10) == pytest.approx(1.0)
    assert lr_factor(10, 2, 10) == pytest.approx(0.1)
