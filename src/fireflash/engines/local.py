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
last old row finishes (``update_weights(..., in_place=True)``: they go on on the new weights instead, and their
results say where each version took over). ``pause()`` stops admission and decoding between steps (running rows keep their
KV); ``resume()`` continues them.

Speculative decoding (``prompt_lookup_tokens`` > 0): drafts come from prompt lookup (``lookup``), all
rows verify in one forward, acceptance is exact speculative sampling, so outputs keep the sampling
distribution and logprobs stay those of the verifying forward pass.

Run: ``engine = LocalEngine(load_policy("smollm2-135m")); await engine.generate([GenerateRequest(...)])``.

This module holds the engine's state and the event-loop side (requests, commands, results); the worker
thread's step (admit, prefill, decode, verify, install, retire) is ``local_step._Worker``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from fireflash.engines.kv import SHARED_PREFIX_MIN_TOKENS, PrefixCache
from fireflash.engines.local_step import _Row, _VersionBatch, _Worker
from fireflash.engines.packed import use_packed_attention
from fireflash.engines.sampling import request_seed
from fireflash.engines.weights import read_weights
from fireflash.protocols import GenerateRequest, GenerateResult


class EngineClosed(RuntimeError):
    """The engine was closed; requests still queued or running end with finish_reason 'abort'."""


class PromptTooLong(ValueError):
    """A prompt leaves no room to sample within the model's position limit."""


class LocalEngine(_Worker):
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

    async def update_weights(
        self, weights: Mapping[str, torch.Tensor] | Path, version: int, *, in_place: bool = False
    ) -> None:
        """Install ``weights`` (state dict or HF directory) as ``version``; returns once installed.

        Running rows finish on their old weights (a private copy); requests admitted after this call
        returns use ``version``. The prefix cache is cleared.

        ``in_place=True`` (SGLang's pause 'in_place', which ``engines/serve.py`` imitates): rows running on the
        current weights instead go on decoding on the new ones, on top of the KV cache the old ones wrote (not
        recomputed); their results are ``local_step.SpannedResult`` (where each version took over), and their KV is
        not offered to the prefix cache. Rows still on a frozen copy from an earlier update stay on it.

        Raises:
            WeightUpdateError: names or shapes do not match the model (nothing is changed).
        """
        state = await asyncio.to_thread(read_weights, weights)
        await self._command(lambda: self._install(state, version, in_place))

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
