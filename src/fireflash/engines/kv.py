"""KV-cache bookkeeping of the local engine: decoding rows' slots, prefill caches, a prefix cache.

- ``SlotBatch``: the rows decoding together, one slot each, every row at its own length.
- ``GrowingLayer`` / ``cache_from``: a request's own cache while its prompt is prefilled (in chunks).
- ``PrefixCache``: finished sequences' KV, reused by later turns and by the other attempts of a group.

Columns no row owns hold finite values (zeros or stale keys), so masked attention weights are exactly 0
and never multiply a NaN.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

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


SHARED_PREFIX_MIN_TOKENS = 64
"""Rows of a ``SlotBatch`` share a prefix's KV only when it is at least this long (shorter ones save little)."""


class SlotBatch:
    """The KV cache of the rows decoded together on one set of weights: row i lives in slot i.

    Layout: per layer, keys and values in buffers [S, H, C, D] (S slots, C columns of capacity). Row i's
    first ``prefix_len[i]`` tokens are the batch's *shared prefix* (one copy, [1, H, P, D] per layer, see
    below); the rest, its *own* tokens, are columns [0, ``lengths[i] - prefix_len[i]``) of slot i,
    left-aligned. A step writes row i's w new tokens at the next w own columns (``update``); ``advance``
    then counts the ones kept, so rejected speculative drafts are simply overwritten next step.

    Why slots: a row joining copies only its own KV in, and a row leaving moves at most the last row into
    its slot, where a padded dense batch re-copies every row's KV on every join and leave (~20 % of the
    engine's time at 16 rows).

    Why a shared prefix: agents share the system prompt and tool specs (~960 tokens for SmolLM2 with the
    four tools), which is most of every row's cache in a rollout. Decode attention on a CPU is bound by
    reading the KV, so every row re-reading its own copy of the prefix makes a 16-row step read ~16x the
    same keys. With one shared copy, ``packed.shared_prefix_attention`` reads it once for all rows and
    merges it with each row's own columns by log-sum-exp (the cascade / shared-prefix decoding of
    FlashInfer and Hydragen; exact up to float rounding). The shared prefix is the longest common prefix of
    the first two rows that share at least ``min_shared_tokens``; a later row that shares at least that
    many tokens but not all of it shrinks it (the rows using it take back the difference into their slots).

    Attributes:
        lengths: [B] int64, tokens of each row in the cache (= the RoPE position of its next token).
        prefix_len: [B] int64, leading tokens of each row held in the shared prefix (0 or its length P).
    """

    def __init__(self, min_shared_tokens: int = SHARED_PREFIX_MIN_TOKENS) -> None:
        """``min_shared_tokens``: shortest prefix worth sharing; 0 disables sharing."""
        self.min_shared_tokens = min_shared_tokens
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self.lengths = torch.zeros(0, dtype=torch.long)
        self.prefix_len = torch.zeros(0, dtype=torch.long)
        self._ids: list[np.ndarray | None] = []  # each row's prompt ids when added (None: never shares)
        self._shared_ids = np.zeros(0, dtype=np.int64)
        self._shared: KV = []
        self._sharing = torch.zeros(0, dtype=torch.long)  # rows using the shared prefix this step
        self._write: tuple[torch.Tensor, torch.Tensor] | None = None  # (rows, cols) [B, w] of this step
        self._span = 0  # own columns the attention reads this step

    @property
    def n_rows(self) -> int:
        return self.lengths.shape[0]

    @property
    def n_shared(self) -> int:
        """Tokens in the shared prefix (0: none)."""
        return int(self._shared_ids.shape[0])

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

    def add_row(self, kv: KV, ids: np.ndarray | None = None) -> None:
        """Add a row whose cache is ``kv`` (per layer [1, H, P, D]) in the next free slot.

        Args:
            ids: [P] the token ids of ``kv``; given, the row may share a prefix with the other rows.
        """
        p = kv[0][0].shape[2]
        if ids is not None and ids.shape[0] != p:
            raise ValueError(f"SlotBatch.add_row: {ids.shape[0]} token ids for a cache of {p} tokens")
        self._reserve(self.n_rows + 1, p, kv)
        slot = self.n_rows
        for (k, v), kb, vb in zip(kv, self._keys, self._values, strict=True):
            kb[slot, :, :p] = k[0]
            vb[slot, :, :p] = v[0]
        self.lengths = torch.cat([self.lengths, torch.tensor([p])])
        self.prefix_len = torch.cat([self.prefix_len, torch.tensor([0])])
        self._ids.append(None if ids is None else ids.copy())
        if ids is not None and self.min_shared_tokens > 0:
            self._share(slot, kv)

    # ── the shared prefix ──

    def _share(self, slot: int, kv: KV) -> None:
        """Fit the new row in ``slot`` to the shared prefix: use it, shrink it, or start one."""
        ids = self._ids[slot]
        if self.n_shared:  # in use: ``keep_rows`` releases it when its last row leaves
            n = common_prefix(ids, self._shared_ids)
        else:
            n = max((common_prefix(ids, other) for i, other in enumerate(self._ids) if i != slot and other is not None),
                    default=0)
        n = min(n, ids.shape[0] - 1)  # every row keeps at least one own column
        if n < self.min_shared_tokens:
            return
        if self.n_shared:
            if n < self.n_shared:
                self._shrink_shared(n)
        else:
            self._shared_ids = ids[:n].copy()
            self._shared = [(k[:, :, :n].clone(), v[:, :, :n].clone()) for k, v in kv]
        for row, other in enumerate(self._ids):
            if other is not None and self.prefix_len[row] == 0 and self._starts_with_shared(other):
                self._move_own(row, self.n_shared)

    def _starts_with_shared(self, ids: np.ndarray) -> bool:
        return ids.shape[0] > self.n_shared and common_prefix(ids, self._shared_ids) == self.n_shared

    def _shrink_shared(self, n: int) -> None:
        """Cut the shared prefix to its first ``n`` tokens; its rows take the cut columns back."""
        for row in torch.nonzero(self.prefix_len).flatten().tolist():
            self._move_own(row, n)
        self._shared_ids = self._shared_ids[:n]
        self._shared = [(k[:, :, :n].clone(), v[:, :, :n].clone()) for k, v in self._shared]

    def _move_own(self, row: int, prefix: int) -> None:
        """Re-split ``row``'s tokens so the first ``prefix`` come from the shared prefix."""
        old = int(self.prefix_len[row])
        own = int(self.lengths[row]) - old
        shift = prefix - old  # > 0: own columns move left (now shared); < 0: they move right
        if shift < 0:
            self._reserve(self.n_rows, own - shift, list(zip(self._keys, self._values)))
        for bufs, shared in ((self._keys, [k for k, _ in self._shared]), (self._values, [v for _, v in self._shared])):
            for buf, s in zip(bufs, shared, strict=True):
                if shift > 0:
                    buf[row, :, : own - shift] = buf[row, :, shift:own].clone()
                elif shift < 0:
                    buf[row, :, -shift : own - shift] = buf[row, :, :own].clone()
                    buf[row, :, :-shift] = s[0, :, prefix:old]
        self.prefix_len[row] = prefix

    def shared_kv(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The shared prefix's [1, H, P, D] keys and values of layer ``layer_idx``."""
        return self._shared[layer_idx]

    @property
    def sharing(self) -> torch.Tensor:
        """[S] int64, this step's rows that use the shared prefix (``begin_step`` sets it)."""
        return self._sharing

    # ── a decode step ──

    def begin_step(self, width: int) -> torch.Tensor:
        """Prepare a step writing ``width`` new tokens per row; returns the decode attention mask over own
        columns, [B, 1, width, L] bool (query j of row i sees own columns < own_i + j + 1, own_i =
        ``lengths[i] - prefix_len[i]``, and all of the shared prefix when ``prefix_len[i] > 0``)."""
        own = self.lengths - self.prefix_len
        self._reserve(self.n_rows, int(own.max()) + width, list(zip(self._keys, self._values)))
        cols = own.unsqueeze(1) + torch.arange(width)  # [B, w]
        self._write = (torch.arange(self.n_rows).unsqueeze(1).expand_as(cols), cols)
        self._span = int(cols.max()) + 1
        self._sharing = torch.nonzero(self.prefix_len).flatten()
        return torch.arange(self._span) < (cols + 1).unsqueeze(-1).unsqueeze(1)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this step's [B, H, w, D] keys/values of layer ``layer_idx``; returns the layer's own
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
            n = int(self.lengths[src] - self.prefix_len[src])
            for bufs in (self._keys, self._values):
                for buf in bufs:
                    buf[hole, :, :n] = buf[src, :, :n]
            order[hole] = src
        self.lengths = self.lengths[order] if order else torch.zeros(0, dtype=torch.long)
        self.prefix_len = self.prefix_len[order] if order else torch.zeros(0, dtype=torch.long)
        self._ids = [self._ids[i] for i in order]
        if not order:  # empty: release the buffers
            self._keys, self._values = [], []
        if not bool(self.prefix_len.any()):  # no row reads the shared prefix: release it
            self._shared, self._shared_ids = [], np.zeros(0, dtype=np.int64)
        return order

    def row_kv(self, row: int) -> KV:
        """One row's whole cache (shared prefix included), contiguous copies [1, H, n, D] per layer (for
        the prefix cache)."""
        p, n = int(self.prefix_len[row]), int(self.lengths[row])
        out = []
        for layer, (kb, vb) in enumerate(zip(self._keys, self._values, strict=True)):
            k, v = kb[row : row + 1, :, : n - p], vb[row : row + 1, :, : n - p]
            if p:
                sk, sv = self._shared[layer]
                k, v = torch.cat([sk[:, :, :p], k], dim=2), torch.cat([sv[:, :, :p], v], dim=2)
            out.append((k.clone(), v.clone()) if not p else (k, v))
        return out


def common_prefix(a: np.ndarray, b: np.ndarray | Sequence[int]) -> int:
    """Length of the common prefix of token ids ``a`` [n] and ``b`` [m]."""
    n = min(a.shape[0], len(b))
    differ = np.flatnonzero(a[:n] != np.asarray(b[:n], dtype=a.dtype))
    return int(differ[0]) if differ.size else n


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
            if min(ids.shape[0], limit) <= best_n:
                continue
            n = common_prefix(prompt[:limit], ids)
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
