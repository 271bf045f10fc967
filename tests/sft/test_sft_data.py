"""SFT examples and micro-batches: labels shifted onto assistant tokens, shared prefixes, token budgets."""

from __future__ import annotations

import pytest

from fireflash.sft.data import Example, make_micro_batch, plan_micro_batches, shared_prefix_len


def ex(ids, mask, name="x"):
    return Example(tuple(ids), tuple(mask), name)


A = ex([1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 1, 1])
B = ex([1, 2, 3, 9, 8], [0, 0, 0, 1, 1])


def test_shared_prefix_stops_before_the_first_predicted_token():
    assert shared_prefix_len([A, B], True) == 2  # common [1,2,3] but B's first label (idx 3) is predicted from idx 2
    assert shared_prefix_len([A], True) == 3
    assert shared_prefix_len([A, B], False) == 0


def test_micro_batch_labels_are_shifted_targets_on_the_mask():
    for share in (True, False):
        mb = make_micro_batch([A, B], pad_id=0, share_prefix=share)
        p = mb.prefix_ids.numel()
        assert mb.prefix_ids.tolist() == [1, 2, 3][:p]
        for row, e in zip(range(2), (A, B)):
            full = list(e.token_ids)
            assert mb.suffix_ids[row, : len(full) - p].tolist() == full[p:]
            targets = {s + p + 1: int(t) for s, t in enumerate(mb.labels[row].tolist()) if t != -100}
            assert targets == {i: full[i] for i, m in enumerate(e.loss_mask) if m}
        assert mb.n_loss_tokens == 4


def test_plan_respects_the_budget_and_names_an_oversized_example():
    rows = [ex([7] * n + [1], [0] * n + [1], f"e{n}") for n in (10, 9, 3, 2)]
    plans = plan_micro_batches(rows, micro_batch_tokens=20, share_prefix=False)
    assert sorted(len(e.token_ids) for p in plans for e in p) == sorted(len(e.token_ids) for e in rows)
    assert all(len(p) * max(len(e.token_ids) for e in p) <= 20 for p in plans)
    with pytest.raises(ValueError, match="sft.micro_batch_tokens = 5 .*e10"):
        plan_micro_batches(rows, micro_batch_tokens=5, share_prefix=False)
    # the shared prefix does not count: one leading 7 is shared (the shortest row predicts its token 2)
    assert len(plan_micro_batches(rows, micro_batch_tokens=10, share_prefix=True)) >= 1
    with pytest.raises(ValueError, match="e10"):
        plan_micro_batches(rows, micro_batch_tokens=10, share_prefix=False)
