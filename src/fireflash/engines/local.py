"""The local engine: a transformers causal LM in process, continuously batching concurrent requests.

Why our own scheduler: an attempt's turns arrive one at a time from many concurrent attempts, so a
useful CPU engine must batch *across* requests that start and finish at different times. A worker
thread owns the model and repeats one packed forward (``packed``): a decode token for every running
row plus up to ``prefill_chunk_tokens`` of queued prompts (chunked prefill, reusing cached prefixes),
then samples, retires finished rows and adds fully prefilled requests to the padded KV batch. Requests
join and leave between steps, each in its own KV slot (``kv.SlotBatch``), the prefix they share (the system
prompt) stored once and read once per step for all of them. A request whose prompt shares a
longer prefix with one still being prefilled waits for it, then reuses its KV from the prefix cache
(the attempts of a group arrive together with one system prompt and task).

What a result's numbers mean (RECIPE.md §1, §5): ``logprobs`` / ``topk_logprobs`` are log q under
softmax(logits / temperature) before top-p (``sampling`` module docstring), computed from the same
forward pass that sampled the token, in the rollout dtype.

Weight versions: ``update_weights`` installs new weights between steps. Rows already running keep
decoding on a private copy of the old weights until they finish, so every token of a result comes from
``result.weight_version``; requests admitted afterwards use the new weights. The copy is freed when the
last old row finishes. ``pause()`` stops admission and decoding between steps (running rows keep their
KV); ``resume()`` continues them.

Speculative decoding (``prompt_lookup_tokens`` > 0): drafts come from prompt lookup (``lookup``), all
rows verify in one forward, acceptance is exact speculative sampling, so outputs keep the sampling
distribution and logprobs stay those of the verifying forward pass.

Run: ``engine = LocalEngine(load_policy("smollm2-135m")); await engine.generate([GenerateRequest(...)])``.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fireflash.engines.kv import (
    SHARED_PREFIX_MIN_TOKENS,
    PrefixCache,
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
    use_packed_attention,
)
from fireflash.engines.sampling import (
    accept_draft,
    request_seed,
    sample_token,
    sampling_logprobs,
    top_k,
)
from fireflash.engines.weights import check_weights, install_weights, read_weights
from fireflash.protocols import GenerateRequest, GenerateResult

# a request waits for another still being prefilled only if that saves more than this many tokens
_SHARE_MIN_TOKENS = 16


class EngineClosed(RuntimeError):
    """The engine was closed; requests still queued or running end with finish_reason 'abort'."""


class PromptTooLong(ValueError):
    """A prompt leaves no room to sample within the model's position limit."""


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

    @property
    def n_sampled(self) -> int:
        return len(self.tokens) - self.n_prompt


@dataclass
class _VersionBatch:
    """Rows decoded together on one weight version, with the module holding those weights."""

    model: torch.nn.Module
    version: int
    kv: SlotBatch
    rows: list[_Row] = field(default_factory=list)


class LocalEngine:
    """In-process continuous-batching engine over a transformers causal LM (implements ``protocols.Engine``).

    Args:
        model: a causal LM (``load_policy`` / ``build_tiny_model``); the engine takes ownership (it may
            cast it to ``rollout_dtype`` and loads new weights into it).
        max_batch_size: rows decoded together (sequences), across weight versions.
        prompt_lookup_tokens: speculative draft length per step, tokens; 0 disables.
        prompt_lookup_ngram_max: longest suffix n-gram matched for drafts, tokens.
        prefix_cache_tokens: KV of finished sequences kept for reuse, tokens; 0 disables.
        prefill_chunk_tokens: most prompt tokens prefilled in one forward (packed with the decode rows);
            larger chunks run the matmuls more efficiently, smaller ones stall decoding less.
        shared_prefix_min_tokens: decoding rows whose prompts share at least this many leading tokens
            (the system prompt) keep one copy of that prefix's KV and read it once per step
            (``kv.SlotBatch``); 0 disables.
        seed: engine seed; a request without ``params.seed`` draws from crc32(f"{seed}:{request_id}").
        num_threads: torch intra-op threads of the engine's worker thread, which runs every forward pass; set
            inside that thread, so the caller's and other threads' budgets are untouched (torch keeps one per
            thread). None: the budget new threads start with (the last ``torch.set_num_threads`` in any thread).
        rollout_dtype: dtype of the rollout copy ('float32', 'bfloat16', 'float16'); a lower precision
            deliberately creates the trainer/rollout mismatch that TIS corrects (RECIPE.md §5).
        weight_version: version tag of the initial weights.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        max_batch_size: int = 16,
        prompt_lookup_tokens: int = 0,
        prompt_lookup_ngram_max: int = 3,
        prefix_cache_tokens: int = 32768,
        prefill_chunk_tokens: int = 256,
        shared_prefix_min_tokens: int = SHARED_PREFIX_MIN_TOKENS,
        seed: int = 0,
        num_threads: int | None = None,
        rollout_dtype: str = "float32",
        weight_version: int = 0,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens must be >= 1, got {prefill_chunk_tokens}")
        dtype = getattr(torch, rollout_dtype, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"rollout_dtype {rollout_dtype!r}: use 'float32', 'bfloat16' or 'float16'")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {num_threads}")
        self.num_threads = num_threads
        self.model = model.to(dtype).eval()
        use_packed_attention(self.model)
        self.max_batch_size = max_batch_size
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.shared_prefix_min_tokens = shared_prefix_min_tokens
        self.prompt_lookup_tokens = prompt_lookup_tokens
        self.prompt_lookup_ngram_max = prompt_lookup_ngram_max
        self.seed = seed
        config = model.config
        self.vocab_size: int = config.vocab_size
        self.max_positions: int = getattr(config, "max_position_embeddings", 1 << 30)
        self._version = weight_version
        self._prefix_cache = PrefixCache(prefix_cache_tokens)
        self._batches: list[_VersionBatch] = []
        self._waiting: deque[_Row] = deque()
        self._prefilling: list[_Row] = []  # admitted, prompt not yet fully in the KV cache (worker thread)
        self._commands: deque[tuple[Callable[[], None], Callable[[BaseException | None], None]]] = deque()
        self._paused = False
        self._closed = False
        self._cond = threading.Condition()
        self.stats = {
            "decode_steps": 0,
            "draft_tokens": 0,
            "accepted_draft_tokens": 0,
            "prefill_tokens": 0,
            "cached_tokens": 0,
            "shared_prefix_row_steps": 0,
        }
        # counters since construction: forward steps, draft tokens proposed / accepted, prompt tokens
        # prefilled / served from the prefix cache, decode rows that read the shared prefix (summed over
        # steps) (benchmarks report them)
        self._thread = threading.Thread(target=self._run, name="fireflash-local-engine", daemon=True)
        self._thread.start()

    # ───────────────────────────── public, async (event-loop side) ─────────────────────────────

    @property
    def weight_version(self) -> int:
        """Version of the weights that newly admitted requests use."""
        return self._version

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """Sample a continuation for each request; concurrent calls are batched together.

        Returns:
            One ``GenerateResult`` per request, in order (see the module docstring for the logprobs).

        Raises:
            ValueError: an empty prompt, an id outside the vocabulary (names request and position).
            PromptTooLong: a prompt at or over the model's position limit.
            EngineClosed: ``close()`` was called before the call.
        """
        if self._closed:
            raise EngineClosed("LocalEngine is closed; build a new engine")
        loop = asyncio.get_running_loop()
        futures, rows = [], []
        now = time.perf_counter()
        for req in requests:
            self._validate(req)
            fut = loop.create_future()
            rows.append(
                _Row(
                    request=req,
                    resolve=_resolver(loop, fut),
                    generator=torch.Generator().manual_seed(
                        request_seed(self.seed, req.request_id, req.params.seed)
                    ),
                    tokens=list(req.prompt_ids),
                    n_prompt=len(req.prompt_ids),
                    t_submit=now,
                )
            )
            futures.append(fut)
        with self._cond:
            self._waiting.extend(rows)
            self._cond.notify()
        try:
            return list(await asyncio.gather(*futures))
        except asyncio.CancelledError:
            for row in rows:
                row.cancelled = True
            raise

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | Path, version: int) -> None:
        """Install ``weights`` (state dict or HF directory) as ``version``; returns once installed.

        Running rows finish on their old weights (a private copy); requests admitted after this call
        returns use ``version``. The prefix cache is cleared.

        Raises:
            WeightUpdateError: names or shapes do not match the model (nothing is changed).
        """
        state = await asyncio.to_thread(read_weights, weights)
        await self._command(lambda: self._install(state, version))

    async def pause(self) -> None:
        """Stop admitting and decoding after the current step (returns when no forward pass is running)."""
        await self._command(lambda: setattr(self, "_paused", True))

    async def resume(self) -> None:
        """Continue admitting and decoding."""
        await self._command(lambda: setattr(self, "_paused", False))

    async def abort(self) -> None:
        """End every queued and running request now: each returns finish_reason 'abort' with the tokens sampled so
        far (vLLM's ``/pause?mode=abort``, imitated by ``engines/vllm_serve.py``)."""
        await self._command(self._abort_all)

    async def close(self) -> None:
        """Stop the worker; queued and running requests end with finish_reason 'abort'."""
        if self._closed:
            return
        with self._cond:
            self._closed = True
            self._cond.notify()
        await asyncio.to_thread(self._thread.join)

    # ───────────────────────────── helpers ─────────────────────────────

    def _validate(self, req: GenerateRequest) -> None:
        if not req.prompt_ids:
            raise ValueError(f"request {req.request_id!r}: prompt_ids is empty; pass at least one token id")
        bad = next(((i, t) for i, t in enumerate(req.prompt_ids) if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise ValueError(
                f"request {req.request_id!r}: prompt_ids[{bad[0]}] = {bad[1]} is outside the vocabulary "
                f"[0, {self.vocab_size}); was it tokenized with another tokenizer?"
            )
        if len(req.prompt_ids) >= self.max_positions:
            raise PromptTooLong(
                f"request {req.request_id!r}: prompt_ids has {len(req.prompt_ids)} tokens, the model's limit "
                f"is {self.max_positions}; compact the context (harness) or use a longer-context model"
            )

    async def _command(self, fn: Callable[[], None]) -> None:
        if self._closed:
            raise EngineClosed("LocalEngine is closed")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._cond:
            self._commands.append((fn, _resolver(loop, fut)))
            self._cond.notify()
        await fut

    # ───────────────────────────── worker thread ─────────────────────────────

    def _run(self) -> None:
        if self.num_threads is not None:  # this thread's own budget (runtime/job.py: the engine's share of the cores)
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

    def _install(self, state: dict[str, torch.Tensor], version: int) -> None:
        check_weights(self.model, state)
        for batch in self._batches:
            if batch.model is self.model and batch.rows:
                # running rows finish on a frozen copy of the weights they started with
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
                and self._prefix_cache.max_tokens > 0
            ):
                self._prefix_cache.insert(np.asarray(row.tokens[:-1], dtype=np.int64), batch.kv.row_kv(i))
            row.resolve(self._result(row, now))
        if len(keep) != len(batch.rows):
            batch.rows = [batch.rows[i] for i in batch.kv.keep_rows(keep)]

    def _result(self, row: _Row, now: float) -> GenerateResult:
        prefilled = row.t_prefilled or now
        return GenerateResult(
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


def _resolver(loop: asyncio.AbstractEventLoop, fut: asyncio.Future) -> Callable[[Any], None]:
    """Thread-safe completion of ``fut``: exceptions are raised to the awaiter, anything else returned."""

    def set_once(value: Any) -> None:
        if fut.done():
            return
        if isinstance(value, BaseException):
            fut.set_exception(value)
        else:
            fut.set_result(value)

    def resolve(value: Any) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(set_once, value)

    return resolve
