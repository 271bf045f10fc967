"""GrowingLayer: in-place appends into spare room, identical to DynamicLayer, never writing into foreign tensors."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from fireflash.engines.kv import GrowingLayer, cache_from

pytestmark = pytest.mark.unit


def _kv(b, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 3, n, 4, generator=g), torch.randn(b, 3, n, 4, generator=g)


def test_appends_equal_dynamic_layer_and_reuse_one_buffer():
    grow, ref = GrowingLayer(), DynamicLayer()
    ptrs = set()
    for step, n in enumerate([7, 1, 1, 1, 2, 1]):
        k, v = _kv(2, n, step)
        got, want = grow.update(k, v), ref.update(k, v)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
        ptrs.add(got[0].untyped_storage().data_ptr())
    assert grow.get_seq_length() == 13
    assert len(ptrs) == 1  # the prompt's buffer had room for every decode column: no copy per step


def test_grows_when_full_and_keeps_the_data():
    layer = GrowingLayer()
    k0, v0 = _kv(1, 100, 0)
    layer.update(k0, v0)
    cap = layer._bufs[0].shape[2]
    extra = _kv(1, cap - 100 + 1, 1)
    keys, values = layer.update(*extra)
    assert layer._bufs[0].shape[2] > cap
    torch.testing.assert_close(keys, torch.cat([k0, extra[0]], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(values, torch.cat([v0, extra[1]], dim=2), rtol=0, atol=0)


def test_never_writes_into_tensors_it_was_given():
    # a prefix-cache entry is shared; a cache built on a view of it must copy before appending
    entry = _kv(1, 10, 0)
    snapshot = (entry[0].clone(), entry[1].clone())
    cache = cache_from([(entry[0][:, :, :6], entry[1][:, :, :6])])
    cache.update(*_kv(1, 3, 1), 0)
    assert torch.equal(entry[0], snapshot[0]) and torch.equal(entry[1], snapshot[1])
    # a tensor assigned from outside is re-homed, not written into
    layer = cache.layers[0]
    outside = _kv(1, 9, 2)
    layer.keys, layer.values = outside
    before = outside[0].clone()
    keys, _ = layer.update(*_kv(1, 1, 3))
    assert torch.equal(outside[0], before) and keys.shape[2] == 10
    torch.testing.assert_close(keys[:, :, :9], before, rtol=0, atol=0)


# ───────────────────────── SlotBatch's shared prefix, checked against per-row dense attention ─────────────────────────

H_KV, GROUP, D = 2, 3, 8
TABLE = torch.randn(400, 50, 2, H_KV, D, generator=torch.Generator().manual_seed(0))  # [position, token, k/v, H, D]


def _row_kv(ids) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of KV for token ids at positions 0..n-1: a row's keys depend only on (position, token),
    as a causal model's first layer does, so rows with one prefix have identical prefix KV."""
    t = TABLE[torch.arange(len(ids)), torch.as_tensor(ids)]  # [n, 2, H, D]
    k, v = t[:, 0].transpose(0, 1)[None], t[:, 1].transpose(0, 1)[None]
    return [(k.clone(), v.clone()), (2 * k, -v)]


def _dense(query, keys, values, width):
    """Reference: each row attends to its whole cache, causal among its ``width`` new tokens."""
    outs = []
    for q, k, v in zip(query, keys, values, strict=True):
        n = k.shape[1]
        mask = torch.arange(n)[None] <= torch.arange(n - width, n)[:, None]
        outs.append(torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask,
                                                                     enable_gqa=True)[0])
    return torch.stack(outs)


def test_shared_prefix_attention_equals_dense_attention_through_joins_shrinks_and_leaves():
    import numpy as np

    from fireflash.engines.kv import SlotBatch
    from fireflash.engines.packed import shared_prefix_attention

    g = torch.Generator().manual_seed(1)
    base = torch.randint(0, 50, (150,), generator=g).tolist()

    def tail(n):
        return torch.randint(0, 50, (n,), generator=g).tolist()

    prompts = [base + tail(20), base + tail(30), base[:100] + tail(5), tail(90)]
    batch, full = SlotBatch(min_shared_tokens=64), []
    for i, ids in enumerate(prompts):
        batch.add_row(_row_kv(ids), np.asarray(ids))
        full.append([ids[:], _row_kv(ids)])
        # rows 0-1 start a 150-token shared prefix; row 2 shares 100 (>= 64): it shrinks; row 3 shares none
        assert batch.n_shared == [0, 150, 100, 100][i]
    assert batch.prefix_len.tolist() == [100, 100, 100, 0]

    def step(width):
        mask = batch.begin_step(width)
        b = batch.n_rows
        q = torch.randn(b, H_KV * GROUP, width, D, generator=g)
        for layer in range(2):
            new_k, new_v = torch.randn(2, b, H_KV, width, D, generator=g)
            keys, values = batch.update(new_k, new_v, layer)
            got = shared_prefix_attention(q, keys, values, mask, *batch.shared_kv(layer), batch.sharing, None)
            ks, vs = [], []
            for r in range(b):
                k, v = full[r][1][layer]
                full[r][1][layer] = (torch.cat([k, new_k[r : r + 1]], 2), torch.cat([v, new_v[r : r + 1]], 2))
                ks.append(full[r][1][layer][0][0])
                vs.append(full[r][1][layer][1][0])
            for r in range(b):  # per row: rows differ in length
                want = _dense(q[r : r + 1], ks[r : r + 1], vs[r : r + 1], width)
                torch.testing.assert_close(got[r : r + 1], want, atol=1e-5, rtol=1e-5)
        return width

    step(1)
    batch.advance(torch.tensor([1, 1, 1, 1]))
    step(2)
    kept = torch.tensor([2, 1, 2, 2])  # row 1's draft was rejected
    batch.advance(kept)
    for r, n in enumerate(kept.tolist()):
        if n < 2:
            full[r][1] = [(k[:, :, :-1], v[:, :, :-1]) for k, v in full[r][1]]
    order = batch.keep_rows([1, 3])  # a sharing row and the unshared one
    full = [full[i] for i in order]
    for r in range(batch.n_rows):
        for (k, v), (fk, fv) in zip(batch.row_kv(r), full[r][1], strict=True):
            assert torch.equal(k, fk) and torch.equal(v, fv)
    step(1)
    batch.advance(torch.tensor([1, 1]))
    assert sorted(batch.prefix_len.tolist()) == [0, 100]
    batch.keep_rows([int(torch.nonzero(batch.prefix_len == 0))])  # the last sharing row leaves:
    # the unused shared prefix gives way to one the newcomer shares with the remaining row
    other = tail(80)
    batch.add_row(_row_kv(prompts[3][:70] + other), np.asarray(prompts[3][:70] + other))
    assert batch.n_shared == 70 and batch.prefix_len.tolist() == [70, 70]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_shared_prefix_attention_in_half_precision_is_as_accurate_as_sdpa(dtype):
    """A bf16 / fp16 rollout copy: the cascade's scores, log-sum-exps and merge run in float32, as SDPA's CPU
    kernel accumulates, so sharing the prefix costs no accuracy next to the unshared path (rounded to the
    dtype throughout, its error was ~7x SDPA's in bf16)."""
    from fireflash.engines.packed import shared_prefix_attention

    g = torch.Generator().manual_seed(2)
    b, w, p, own, d = 4, 2, 300, 40, 64
    q = 1.5 * torch.randn(b, H_KV * GROUP, w, d, generator=g)
    sk, sv = torch.randn(2, 1, H_KV, p, d, generator=g)
    k, v = torch.randn(2, b, H_KV, own, d, generator=g)
    mask = (torch.arange(own) < torch.arange(own - w + 1, own + 1)[:, None])[None, None].expand(b, 1, w, own)
    full_k, full_v = torch.cat([sk.expand(b, -1, -1, -1), k], 2), torch.cat([sv.expand(b, -1, -1, -1), v], 2)
    full_mask = torch.cat([torch.ones(b, 1, w, p, dtype=torch.bool), mask], 3)

    def sdpa(*ts):
        return torch.nn.functional.scaled_dot_product_attention(*ts, attn_mask=full_mask, enable_gqa=True)

    want = sdpa(q.double(), full_k.double(), full_v.double())
    half = [t.to(dtype) for t in (q, k, v, sk, sv)]
    got = shared_prefix_attention(half[0], half[1], half[2], mask, half[3], half[4], torch.arange(b), None)
    sdpa_err = (sdpa(half[0], full_k.to(dtype), full_v.to(dtype)).double() - want).abs().max()
    assert got.dtype == dtype
    assert (got.double() - want).abs().max() <= 1.5 * sdpa_err
