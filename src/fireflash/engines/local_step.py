"""The worker thread's side of ``LocalEngine``: one packed step at a time (admit, chunked prefill with prefix
reuse, decode, speculative verification, weight installs between steps, retiring finished rows). ``_Worker``
holds those methods; ``LocalEngine`` (``local``) holds the state they use and the event-loop side.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from pydantic import Field

from fireflash.engines.kv import (
    SlotBatch,
    cache_from,
    cache_tensors,
    common_prefix,
)
from fireflash.engines.lookup import propose_draft
from fireflash.engines.packed import (
    DecodePart,
    PackPlan,
    PrefillPart,
    packed_forward,
    prefill_mask,
)
from fireflash.engines.sampling import (
    accept_draft,
    sample_token,
    sampling_logprobs,
    top_k,
)
from fireflash.engines.weights import check_weights, install_weights
from fireflash.protocols import GenerateRequest, GenerateResult

# a request waits for another still being prefilled only if that saves more than this many tokens
_SHARE_MIN_TOKENS = 16


@dataclass
class _Row:
    """One request while it is queued or decoding (worker-thread state)."""

    request: GenerateRequest
    resolve: Callable[[GenerateResult | BaseException], None]
    generator: torch.Generator
    tokens: list[int]  # prompt + sampled; the last one is not yet in the KV cache
    n_prompt: int
    t_submit: float
    version: int = -1
    n_cached: int = 0
    cache: Any = None  # DynamicCache of the prompt prefix prefilled so far; None before and after prefill
    n_prefilled: int = 0  # prompt tokens in ``cache``
    logprobs: list[float] = field(default_factory=list)
    topk_ids: list[list[int]] = field(default_factory=list)
    topk_logprobs: list[list[float]] = field(default_factory=list)
    finish_reason: str | None = None
    cancelled: bool = False
    t_admit: float = 0.0
    t_prefilled: float = 0.0
    # (tokens sampled, version) at each in-place update the row went on across (``_install(in_place=True)``)
    switches: list[tuple[int, int]] = field(default_factory=list)

    @property
    def n_sampled(self) -> int:
        return len(self.tokens) - self.n_prompt


class SpannedResult(GenerateResult):
    """A result whose request went on decoding across an in-place weight update (``LocalEngine.update_weights(...,
    in_place=True)``, SGLang's pause 'in_place'): ``weight_version`` is the version that sampled its first token."""

    version_starts: list[tuple[int, int]] = Field(
        description="(output position, version): from that token on, that version sampled (later ones take over)."
    )


@dataclass
class _VersionBatch:
    """Rows decoded together on one weight version, with the module holding those weights."""

    model: torch.nn.Module
    version: int
    kv: SlotBatch
    rows: list[_Row] = field(default_factory=list)


class _Worker:
    """The worker thread's methods of ``LocalEngine`` (its attributes are set by ``LocalEngine.__init__``); only
    the worker thread calls them, except ``_command``'s functions, which it runs between steps."""

    def _run(self) -> None:
        if self.num_threads is not None:  # this thread's own budget (cli/train.py: the engine's share of the cores)
            # get first: torch initialises a thread's budget lazily, on its first use, from the last value set in
            # any thread; a set before that initialisation would be overwritten by another role's later set
            torch.get_num_threads()
            torch.set_num_threads(self.num_threads)
        try:
            with torch.inference_mode():
                self._loop()
        except Exception as e:  # noqa: BLE001 - a bug in the worker must not leave callers waiting forever
            self._closed = True
            crash = RuntimeError(f"local engine worker crashed: {e!r}")
            crash.__cause__ = e
            for row in self._all_rows():
                row.resolve(crash)
            for _, done in self._commands:
                done(crash)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (
                    self._commands
                    or self._closed
                    or (not self._paused and (self._waiting or self._prefilling or self._n_running()))
                ):
                    self._cond.wait()
                commands = list(self._commands)
                self._commands.clear()
                closing = self._closed
            for fn, done in commands:
                try:
                    fn()
                    done(None)
                except Exception as e:  # noqa: BLE001 - reported to the awaiting caller
                    done(e)
            if closing:
                self._abort_all()
                return
            if self._paused:
                continue
            self._admit()
            current = self._current_batch()
            for batch in list(self._batches):
                prefills = self._plan_prefills() if batch is current else []
                if batch.rows or prefills:
                    try:
                        self._step(batch, prefills)
                    except Exception as e:  # noqa: BLE001 - fail this step's requests, serve the others
                        failed = batch.rows + [r for r, _ in prefills]
                        for row in failed:
                            row.resolve(e)
                        batch.rows, batch.kv = [], SlotBatch(self.shared_prefix_min_tokens)
                        self._prefilling = [r for r in self._prefilling if all(r is not f for f in failed)]
            self._batches = [
                b for b in self._batches if b.rows or (b.model is self.model and b.version == self._version)
            ]

    def _n_running(self) -> int:
        return sum(len(b.rows) for b in self._batches)

    def _all_rows(self) -> list[_Row]:
        return [r for b in self._batches for r in b.rows] + self._prefilling + list(self._waiting)

    def _current_batch(self) -> _VersionBatch:
        for batch in self._batches:
            if batch.version == self._version and batch.model is self.model:
                return batch
        batch = _VersionBatch(self.model, self._version, SlotBatch(self.shared_prefix_min_tokens))
        self._batches.append(batch)
        return batch

    def _install(self, state: dict[str, torch.Tensor], version: int, in_place: bool = False) -> None:
        check_weights(self.model, state)
        for batch in self._batches:
            if batch.model is not self.model:
                continue
            if in_place:  # the rows go on with the KV they have; their next token on is the new weights'
                for row in batch.rows:
                    row.switches.append((row.n_sampled, version))
                batch.version = version
            elif batch.rows:  # running rows finish on a frozen copy of the weights they started with
                batch.model = copy.deepcopy(self.model)
        install_weights(self.model, state)
        self._version = version
        self._prefix_cache.clear()
        for row in self._prefilling:  # nothing sampled yet: prefill again, on the new weights
            row.cache, row.n_prefilled = None, 0

    def _abort_all(self) -> None:
        rows = self._all_rows()
        self._waiting.clear()
        self._prefilling = []
        self._batches = []
        for row in rows:
            row.finish_reason = "abort"
            row.resolve(self._result(row, time.perf_counter()))

    def _admit(self) -> None:
        """Move queued requests to prefill while the batch has room (rows decoding + rows prefilling)."""
        while self._waiting and self._n_running() + len(self._prefilling) < self.max_batch_size:
            with self._cond:
                row = self._waiting.popleft()
            if not row.cancelled:
                row.t_admit = time.perf_counter()
                self._prefilling.append(row)

    def _plan_prefills(self) -> list[tuple[_Row, int]]:
        """This step's prompt chunks, (row, tokens), in admission order within ``prefill_chunk_tokens``."""
        self._prefilling = [r for r in self._prefilling if not r.cancelled]
        plan, budget = [], self.prefill_chunk_tokens
        for row in self._prefilling:
            if budget == 0:
                break
            if row.cache is None and not self._start_prefill(row):
                continue
            take = min(budget, row.n_prompt - row.n_prefilled)
            plan.append((row, take))
            budget -= take
        return plan

    def _start_prefill(self, row: _Row) -> bool:
        """Start ``row``'s KV cache from its longest cached prefix. False (try again next step) while a
        request still being prefilled shares a longer prefix: it will be in the prefix cache when done."""
        prompt = np.asarray(row.tokens, dtype=np.int64)
        n_cached, cached_kv = self._prefix_cache.lookup(prompt)
        if self._prefix_cache.max_tokens > 0:
            for other in self._prefilling:
                shared = common_prefix(prompt, other.tokens) if other.cache is not None else 0
                if shared > n_cached + _SHARE_MIN_TOKENS:
                    return False
        row.cache = cache_from(cached_kv)  # cached tensors are never written in place
        row.n_cached = row.n_prefilled = n_cached
        row.version = self._version
        self.stats["cached_tokens"] += n_cached
        return True

    def _finish_prefill(self, row: _Row, batch: _VersionBatch, logits: torch.Tensor) -> None:
        """Sample ``row``'s first token from its last prompt position's ``logits`` [V]; add it to
        ``batch``."""
        self._prefilling = [r for r in self._prefilling if r is not row]
        self._emit_sampled(row, logits, sampling_logprobs(logits.unsqueeze(0), _temps([row]))[0])
        row.t_prefilled = time.perf_counter()
        # exact-size copies: the growing buffers carry spare room the prefix cache should not keep alive
        kv = [(k.contiguous(), v.contiguous()) for k, v in cache_tensors(row.cache)]
        row.cache = None
        if self._prefix_cache.max_tokens > 0:
            # cached at once, not only when the row finishes: the other attempts of a group arrive together
            self._prefix_cache.insert(np.asarray(row.tokens[: row.n_prompt], dtype=np.int64), kv)
        if row.finish_reason is not None:
            row.resolve(self._result(row, row.t_prefilled))
            return
        batch.kv.add_row(kv, np.asarray(row.tokens[: row.n_prompt], dtype=np.int64))
        batch.rows.append(row)

    def _emit(
        self,
        row: _Row,
        token: int,
        logq_row: torch.Tensor,
        ids: torch.Tensor | None,
        vals: torch.Tensor | None,
    ) -> None:
        """Record one sampled token and decide whether the row is finished."""
        row.tokens.append(token)
        row.logprobs.append(float(logq_row[token]))
        k = row.request.params.n_top_logprobs
        row.topk_ids.append(ids[:k].tolist() if k else [])
        row.topk_logprobs.append(vals[:k].tolist() if k else [])
        params = row.request.params
        if token in params.stop_token_ids:
            row.finish_reason = "stop"
        elif row.n_sampled >= params.max_new_tokens or len(row.tokens) >= self.max_positions:
            row.finish_reason = "length"

    def _emit_sampled(
        self, row: _Row, raw: torch.Tensor, logq_row: torch.Tensor, topk: tuple | None = None
    ) -> None:
        p = row.request.params
        ids, vals = topk if topk is not None else top_k(logq_row, p.n_top_logprobs)
        self._emit(
            row, sample_token(logq_row, raw, p.temperature, p.top_p, row.generator), logq_row, ids, vals
        )

    def _drafts(self, batch: _VersionBatch) -> list[list[int]]:
        if self.prompt_lookup_tokens <= 0:
            return [[] for _ in batch.rows]
        drafts = []
        for row in batch.rows:
            room = (
                min(row.request.params.max_new_tokens - row.n_sampled, self.max_positions - len(row.tokens))
                - 1
            )
            history = np.asarray(row.tokens, dtype=np.int64)
            drafts.append(
                propose_draft(history, min(self.prompt_lookup_tokens, room), self.prompt_lookup_ngram_max)
            )
        return drafts

    def _step(self, batch: _VersionBatch, prefills: list[tuple[_Row, int]]) -> None:
        """One packed forward on ``batch``'s weights: a decode (or draft-verification) step for each of its
        rows, and the next prompt chunk of each request in ``prefills`` (see the ``packed`` module)."""
        rows = batch.rows
        drafts = self._drafts(batch)
        width = 1 + max((len(d) for d in drafts), default=0)
        n_decode = len(rows) * width
        ids, positions, decode = [], [], None
        if rows:
            # padding after a short draft gets token 0: its KV column is never counted (``advance``)
            step_ids = torch.zeros(len(rows), width, dtype=torch.long)
            for i, (row, draft) in enumerate(zip(rows, drafts, strict=True)):
                step_ids[i, : 1 + len(draft)] = torch.tensor([row.tokens[-1], *draft])
            ids.append(step_ids.flatten())
            positions.append((batch.kv.lengths.unsqueeze(1) + torch.arange(width)).flatten())
            decode = DecodePart(batch.kv, len(rows), width, batch.kv.begin_step(width))
        parts, keep = [], list(range(n_decode))
        for row, take in prefills:
            start = row.n_prefilled
            ids.append(torch.tensor(row.tokens[start : start + take]))
            positions.append(torch.arange(start, start + take))
            parts.append(PrefillPart(row.cache, take, prefill_mask(start, take)))
            if start + take == row.n_prompt:
                keep.append(n_decode + sum(p.n_new for p in parts) - 1)
        plan, keep_ids = PackPlan(decode, parts), torch.tensor(keep, dtype=torch.long)
        logits = packed_forward(batch.model, torch.cat(ids), torch.cat(positions), plan, keep_ids).float()  # [K, V]
        if rows:
            self.stats["decode_steps"] += 1
            self.stats["shared_prefix_row_steps"] += len(batch.kv.sharing)
            step_logits = logits[:n_decode].unflatten(0, (len(rows), width))  # [B, width, V]
            logq = sampling_logprobs(step_logits, _temps(rows).unsqueeze(-1))
            kmax = max(r.request.params.n_top_logprobs for r in rows)
            top_ids, top_vals = top_k(logq, kmax)
            emitted = [
                self._verify(row, draft, step_logits[i], logq[i], top_ids[i], top_vals[i])
                for i, (row, draft) in enumerate(zip(rows, drafts, strict=True))
            ]
            batch.kv.advance(torch.tensor(emitted))
            self._retire(batch)
        first_tokens = iter(logits[n_decode:])
        for row, take in prefills:
            row.n_prefilled += take
            self.stats["prefill_tokens"] += take
            if row.n_prefilled == row.n_prompt:
                self._finish_prefill(row, batch, next(first_tokens))

    def _verify(
        self,
        row: _Row,
        draft: list[int],
        raw: torch.Tensor,
        logq: torch.Tensor,
        ids: torch.Tensor,
        vals: torch.Tensor,
    ) -> int:
        """Emit this step's tokens of one row; returns how many (= new real KV columns)."""
        p = row.request.params
        self.stats["draft_tokens"] += len(draft)
        for j, d in enumerate(draft):
            accepted, token = accept_draft(logq[j], raw[j], d, p.temperature, p.top_p, row.generator)
            self._emit(row, token, logq[j], ids[j], vals[j])
            self.stats["accepted_draft_tokens"] += int(accepted)
            if not accepted or row.finish_reason is not None:
                return j + 1
        j = len(draft)
        self._emit_sampled(row, raw[j], logq[j], (ids[j], vals[j]))
        return j + 1

    def _retire(self, batch: _VersionBatch) -> None:
        keep, now = [], time.perf_counter()
        for i, row in enumerate(batch.rows):
            if row.finish_reason is None and not row.cancelled:
                keep.append(i)
                continue
            if (
                row.finish_reason is not None
                and batch.model is self.model
                and not row.switches  # its KV mixes versions: a later request must not reuse it
                and self._prefix_cache.max_tokens > 0
            ):
                self._prefix_cache.insert(np.asarray(row.tokens[:-1], dtype=np.int64), batch.kv.row_kv(i))
            row.resolve(self._result(row, now))
        if len(keep) != len(batch.rows):
            batch.rows = [batch.rows[i] for i in batch.kv.keep_rows(keep)]

    def _result(self, row: _Row, now: float) -> GenerateResult:
        prefilled = row.t_prefilled or now
        spanned = {"version_starts": row.switches} if row.switches else {}
        return (SpannedResult if spanned else GenerateResult)(
            **spanned,
            request_id=row.request.request_id,
            token_ids=row.tokens[row.n_prompt :],
            logprobs=row.logprobs,
            topk_ids=row.topk_ids,
            topk_logprobs=row.topk_logprobs,
            finish_reason=row.finish_reason or "abort",
            weight_version=row.version if row.version >= 0 else self._version,
            n_cached_prompt_tokens=row.n_cached,
            timings_sec={
                "queue": max(0.0, (row.t_admit or now) - row.t_submit),
                "prefill": max(0.0, prefilled - (row.t_admit or now)),
                "decode": max(0.0, now - prefilled),
            },
        )


def _temps(rows: Sequence[_Row]) -> torch.Tensor:
    """[B, 1] temperatures of ``rows``."""
    return torch.tensor([[r.request.params.temperature] for r in rows], dtype=torch.float32)
