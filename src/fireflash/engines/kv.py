"""KV-cache bookkeeping of the local engine: decoding rows' slots, prefill caches, a prefix cache.

- ``SlotBatch``: the rows decoding together, one slot each, every row at its own length.
- ``GrowingLayer`` / ``cache_from``: a request's own cache while its prompt is prefilled (in chunks).
- ``PrefixCache``: finished sequences' KV, reused by later turns and by the other attempts of a group.

Columns no row owns hold finite values (zeros or stale keys), so masked attention weights are exactly 0
and never multiply a NaN.
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

    Why: ``DynamicLayer.update`` concatenates, so every prefill chunk would copy the request's whole
    cache so far. Here ``keys`` / ``values`` are views ``[B, H, :L, D]`` of buffers with room for more
    columns; a chunk writes only its new columns. When the room runs out the buffers grow by half
    (amortised O(1) per column). Tensors assigned from outside (prefix-cache views) are never written
    into: the next ``update`` first copies them into a fresh buffer of this layer's own.
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


class SlotBatch:
    """The KV cache of the rows decoded together on one set of weights: row i lives in slot i.

    Layout: per layer, keys and values in buffers [S, H, C, D] (S slots, C columns of capacity); row i's
    tokens are columns [0, ``lengths[i]``) of slot i, left-aligned. A step writes row i's w new tokens at
    columns ``lengths[i]`` .. ``lengths[i] + w - 1`` (``update``); ``advance`` then counts the ones kept,
    so rejected speculative drafts are simply overwritten next step. Why slots: a row joining copies only
    its own KV in, and a row leaving moves at most the last row into its slot, where a padded dense batch
    re-copies every row's KV on every join and leave (~20 % of the engine's time at 16 rows).

    Attributes:
        lengths: [B] int64, tokens of each row in the cache (= the RoPE position of its next token).
    """

    def __init__(self) -> None:
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self.lengths = torch.zeros(0, dtype=torch.long)
        self._write: tuple[torch.Tensor, torch.Tensor] | None = None  # (rows, cols) [B, w] of this step
        self._span = 0  # columns the attention reads this step

    @property
    def n_rows(self) -> int:
        return self.lengths.shape[0]

    def _capacity(self) -> tuple[int, int]:
        return (self._keys[0].shape[0], self._keys[0].shape[2]) if self._keys else (0, 0)

    def _reserve(self, slots: int, columns: int, like: KV) -> None:
        """Make room for ``slots`` rows of ``columns`` tokens (buffers grow by half: amortised O(1))."""
        have_slots, have_cols = self._capacity()
        if slots <= have_slots and columns <= have_cols:
            return
        new_slots = max(slots, 2 * have_slots) if slots > have_slots else have_slots
        new_cols = columns + max(columns // 2, 64) if columns > have_cols else have_cols
        for i, (k, v) in enumerate(like):
            for bufs, t in ((self._keys, k), (self._values, v)):
                _, h, _, d = t.shape
                buf = t.new_zeros(new_slots, h, new_cols, d)  # zeros: unused columns stay finite
                if i < len(bufs):
                    buf[:have_slots, :, :have_cols] = bufs[i]
                    bufs[i] = buf
                else:
                    bufs.append(buf)

    def add_row(self, kv: KV) -> None:
        """Add a row whose cache is ``kv`` (per layer [1, H, P, D]) in the next free slot."""
        p = kv[0][0].shape[2]
        self._reserve(self.n_rows + 1, p, kv)
        slot = self.n_rows
        for (k, v), kb, vb in zip(kv, self._keys, self._values, strict=True):
            kb[slot, :, :p] = k[0]
            vb[slot, :, :p] = v[0]
        self.lengths = torch.cat([self.lengths, torch.tensor([p])])

    def begin_step(self, width: int) -> torch.Tensor:
        """Prepare a step writing ``width`` new tokens per row; returns the decode attention mask
        [B, 1, width, L] bool (query j of row i sees columns < lengths[i] + j + 1)."""
        self._reserve(self.n_rows, int(self.lengths.max()) + width, list(zip(self._keys, self._values)))
        cols = self.lengths.unsqueeze(1) + torch.arange(width)  # [B, w]
        self._write = (torch.arange(self.n_rows).unsqueeze(1).expand_as(cols), cols)
        self._span = int(cols.max()) + 1
        return torch.arange(self._span) < (cols + 1).unsqueeze(-1).unsqueeze(1)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this step's [B, H, w, D] keys/values of layer ``layer_idx``; returns the layer's
        [B, H, L, D] keys and values (views) for the attention (``begin_step`` first)."""
        rows, cols = self._write
        b = self.n_rows
        for buf, new in ((self._keys[layer_idx], key_states), (self._values[layer_idx], value_states)):
            buf.transpose(1, 2).index_put_((rows, cols), new.transpose(1, 2))
        return self._keys[layer_idx][:b, :, : self._span], self._values[layer_idx][:b, :, : self._span]

    def advance(self, kept: torch.Tensor) -> None:
        """After a step: ``kept`` [B] of each row's new tokens are real (the rest were rejected drafts)."""
        self.lengths = self.lengths + kept
        self._write = None

    def keep_rows(self, keep: list[int]) -> list[int]:
        """Drop every row not in ``keep`` (indices in current order); returns the new slot order as old
        row indices. Kept rows stay in their slots, except that rows past the new end fill the holes."""
        stay = {i for i in keep if i < len(keep)}
        movers = [i for i in keep if i >= len(keep)]
        holes = [i for i in range(len(keep)) if i not in stay]
        order = list(range(len(keep)))
        for hole, src in zip(holes, movers, strict=True):
            n = int(self.lengths[src])
            for bufs in (self._keys, self._values):
                for buf in bufs:
                    buf[hole, :, :n] = buf[src, :, :n]
            order[hole] = src
        self.lengths = self.lengths[order] if order else torch.zeros(0, dtype=torch.long)
        if not order:  # empty: release the buffers
            self._keys, self._values = [], []
        return order

    def row_kv(self, row: int) -> KV:
        """One row's cache, contiguous copies [1, H, n, D] per layer (for the prefix cache)."""
        n = int(self.lengths[row])
        return [
            (kb[row : row + 1, :, :n].clone(), vb[row : row + 1, :, :n].clone())
            for kb, vb in zip(self._keys, self._values, strict=True)
        ]


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
