"""KV-cache bookkeeping of the local engine: one padded batch that rows join and leave, and a prefix cache.

Layout: every layer holds keys/values [B, H, L, D] in a transformers ``DynamicCache``; ``mask`` [B, L]
marks real columns (1) versus padding or rejected speculative drafts (0). Rows are right-aligned when
they join (left padding), so a new decode column is appended for every row at once; a row's real tokens
need not be contiguous, which is what lets a speculative step discard rejected drafts by masking
instead of copying. Padding columns hold finite values (zeros or copies), so masked attention weights
are exactly 0 and never multiply a NaN.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer (keys, values), each [B, H, L, D]."""


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends new columns in place into spare capacity.

    Why: ``DynamicLayer.update`` concatenates, so every decode step copies the whole batch's KV (at 16
    rows x 2,000 tokens, ~1.5 GB per step for SmolLM2). Here ``keys`` / ``values`` are views
    ``[B, H, :L, D]`` of buffers with room for more columns; a step writes only its new columns. When
    the room runs out the buffers grow by half (amortised O(1) per column). Tensors assigned from outside
    (``PaddedBatch`` joins, drops and compactions; prefix-cache views) are never written into: the next
    ``update`` first copies them into a fresh buffer of this layer's own.
    """

    def __init__(self) -> None:
        super().__init__()
        self._bufs: tuple[torch.Tensor, torch.Tensor] | None = None
        self._views: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        length = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        own = self._views is not None and self.keys is self._views[0] and self.values is self._views[1]
        if not own or length + n > self._bufs[0].shape[-2]:
            self._rehome(key_states, value_states, length, length + n)
        kbuf, vbuf = self._bufs
        kbuf[:, :, length : length + n] = key_states
        vbuf[:, :, length : length + n] = value_states
        self.keys, self.values = kbuf[:, :, : length + n], vbuf[:, :, : length + n]
        self._views = (self.keys, self.values)
        return self.keys, self.values

    def _rehome(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int, need: int) -> None:
        capacity = need + max(need // 2, 64)
        bufs = []
        for old, new in ((self.keys, key_states), (self.values, value_states)):
            b, h, _, d = new.shape
            buf = new.new_empty(b, h, capacity, d)
            if length:
                buf[:, :, :length] = old
            bufs.append(buf)
        self._bufs = (bufs[0], bufs[1])


def cache_from(kv: KV | None = None) -> DynamicCache:
    """A ``DynamicCache`` of ``GrowingLayer``s starting from these tensors (copied once into room to grow)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    for layer_idx, (k, v) in enumerate(kv or []):
        cache.update(k, v, layer_idx)
    return cache


def cache_tensors(cache: DynamicCache) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _left_pad(t: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    if n == 0:
        return t
    shape = list(t.shape)
    shape[dim] = n
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class PaddedBatch:
    """The KV cache and column mask of the rows decoded together on one set of weights.

    Attributes:
        cache: the ``DynamicCache`` the model reads and appends to; None while empty.
        mask: [B, L] int64, 1 on real columns.
    """

    def __init__(self) -> None:
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor = torch.zeros(0, 0, dtype=torch.long)

    @property
    def n_rows(self) -> int:
        return self.mask.shape[0]

    @property
    def n_columns(self) -> int:
        return self.mask.shape[1]

    def add_row(self, kv: KV) -> None:
        """Append one row whose cache is ``kv`` (each [1, H, P, D], all real), right-aligned with the rest."""
        p = kv[0][0].shape[2]
        row_mask = torch.ones(1, p, dtype=torch.long)
        if self.cache is None:
            self.cache, self.mask = cache_from(kv), row_mask
            return
        total = max(self.n_columns, p)
        pad_old, pad_new = total - self.n_columns, total - p
        for layer, (k, v) in zip(self.cache.layers, kv, strict=True):
            layer.keys = torch.cat([_left_pad(layer.keys, pad_old, 2), _left_pad(k, pad_new, 2)], dim=0)
            layer.values = torch.cat([_left_pad(layer.values, pad_old, 2), _left_pad(v, pad_new, 2)], dim=0)
        self.mask = torch.cat([_left_pad(self.mask, pad_old, 1), _left_pad(row_mask, pad_new, 1)], dim=0)

    def keep_rows(self, keep: list[int]) -> None:
        """Drop every row not in ``keep`` (indices in current order), then trim all-padding columns."""
        if not keep:
            self.cache, self.mask = None, torch.zeros(0, 0, dtype=torch.long)
            return
        index = torch.tensor(keep, dtype=torch.long)
        self.mask = self.mask.index_select(0, index)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)
            layer.values = layer.values.index_select(0, index)
        self.compact(force=False)

    def row_kv(self, row: int) -> KV:
        """The real columns of one row, contiguous copies [1, H, n, D] per layer (for the prefix cache)."""
        cols = self.mask[row].nonzero().squeeze(1)
        return [
            (
                layer.keys[row : row + 1].index_select(2, cols).contiguous(),
                layer.values[row : row + 1].index_select(2, cols).contiguous(),
            )
            for layer in self.cache.layers
        ]

    def compact(self, force: bool) -> None:
        """Remove padding columns: leading ones always (a cheap slice); holes when ``force`` or when
        more than a fifth of the columns are padding (a gather that right-aligns every row)."""
        if self.n_rows == 0:
            return
        used = self.mask.any(dim=0).nonzero()
        first = int(used[0]) if used.numel() else self.n_columns
        if first > 0:
            self.mask = self.mask[:, first:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]
        counts = self.mask.sum(dim=1)
        longest = int(counts.max())
        if longest == self.n_columns or not (force or self.n_columns > 1.25 * longest + 16):
            return
        # Column j of the result takes row i's (j - (longest - count_i))-th real column; padding slots copy
        # column 0 of that row (finite values, masked out).
        order = torch.argsort(self.mask, dim=1, descending=True, stable=True)[:, :longest]
        shift = (longest - counts).unsqueeze(1)
        slots = torch.arange(longest).unsqueeze(0)
        src = torch.where(
            slots >= shift, order.gather(1, (slots - shift).clamp(min=0)), torch.zeros_like(order)
        )
        self.mask = (slots >= shift).long()
        for layer in self.cache.layers:
            b, h, _, d = layer.keys.shape
            index = src[:, None, :, None].expand(b, h, longest, d)
            layer.keys = layer.keys.gather(2, index)
            layer.values = layer.values.gather(2, index)


class PrefixCache:
    """Finished sequences' KV, reused for the longest common prefix with a later prompt (an attempt's next
    turn extends its previous one; the attempts of a group share the system prompt and task). Least recently used entries are evicted to keep
    at most ``max_tokens`` cached tokens. Cleared on every weight update: old-weight KV is invalid."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, tuple[np.ndarray, KV]] = OrderedDict()
        self._n_tokens = 0
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: np.ndarray) -> tuple[int, KV | None]:
        """The longest common prefix of ``prompt`` [P] with any cached sequence, capped at P - 1 tokens so
        at least one token is left to prefill: (its length n, per-layer KV views [1, H, n, D])."""
        best_key, best_n = None, 0
        limit = prompt.shape[0] - 1
        for key, (ids, _) in self._entries.items():
            m = min(ids.shape[0], limit)
            if m <= best_n:
                continue
            differ = np.flatnonzero(ids[:m] != prompt[:m])
            n = int(differ[0]) if differ.size else m
            if n > best_n:
                best_key, best_n = key, n
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        return best_n, [(k[:, :, :best_n], v[:, :, :best_n]) for k, v in self._entries[best_key][1]]

    def insert(self, ids: np.ndarray, kv: KV) -> None:
        """Cache ``kv`` (per layer [1, H, n, D]) as the KV of ``ids`` [n]."""
        n = ids.shape[0]
        if n == 0 or n > self.max_tokens:
            return
        while self._n_tokens + n > self.max_tokens:
            _, (old, _) = self._entries.popitem(last=False)
            self._n_tokens -= old.shape[0]
        self._entries[self._next_key] = (ids.copy(), kv)
        self._next_key += 1
        self._n_tokens += n

    def clear(self) -> None:
        self._entries.clear()
        self._n_tokens = 0
