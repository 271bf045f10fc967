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
