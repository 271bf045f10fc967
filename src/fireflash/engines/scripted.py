"""A deterministic scripted engine for tests of every stage (STYLE.md 21: fakes ship in src, not mocks).

``ScriptedEngine`` implements the ``Engine`` protocol. It replays scripted assistant texts token-exactly
through the real tokenizer (the ids are ``tokenizer.encode(text)`` + the request's first stop id; a turn
given as a list of ids is replayed verbatim, e.g. to test non-canonical tokenizations), with
plausible, deterministic log-probabilities and top-K rows (a proper distribution: the K probabilities sum
to at most 1 and are sorted by descending q). When the script runs out it samples from an optional model
(e.g. ``fireflash.models.build_tiny_model``) with real temperature-scaled logprobs; without one it raises
``ScriptExhausted``. It simulates a prefix cache so ``n_cached_prompt_tokens`` is meaningful.

    engine = ScriptedEngine(tok, ['<tool_call>\\n{"name": "Bash", "arguments": {"command": "ls"}}\\n</tool_call>', "Done."])
"""

from __future__ import annotations

import asyncio
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fireflash.models import kv_cache_name
from fireflash.protocols import GenerateRequest, GenerateResult

Turn = str | list[int]
Script = Sequence[Turn] | Callable[[GenerateRequest], Turn | None]


class ScriptExhausted(RuntimeError):
    """The script has no text left for a request and no model was given to sample from."""


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts`` (crc32: stable across processes, unlike hash())."""
    return zlib.crc32(":".join(map(str, parts)).encode()) / 2**32


class ScriptedEngine:
    """Replays ``script`` turn by turn; then samples from ``model`` if given.

    Args:
        tokenizer: the tokenizer the harness uses (texts are encoded with it, no special tokens added).
        script: turns (texts or id lists) consumed in order by successive requests, or a function
            request → turn (None: no turn).
        model: optional causal LM sampled once the script is spent (transformers API:
            ``model(ids [1, T], cache=..., use_cache=True)`` → ``.logits`` [1, T, V] and ``.cache``;
            ``past_key_values`` before transformers 5.24).
        seed: varies the synthetic logprobs and the model's draws.
        weight_version: the initial weight version reported on every sampled token.
    """

    def __init__(self, tokenizer: Any, script: Script = (), model: Any = None, seed: int = 0, weight_version: int = 0) -> None:
        self.tokenizer = tokenizer
        self._script = script if callable(script) else list(script)
        self._next = 0
        self.model = model
        self.seed = seed
        self._version = weight_version
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._cache: list[list[int]] = []  # recent prompt+output sequences (a simulated prefix cache)
        self.requests: list[GenerateRequest] = []  # every request seen, for tests

    @property
    def weight_version(self) -> int:
        return self._version

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """One result per request, in order. Raises ``ScriptExhausted`` when nothing is left to replay."""
        await self._resumed.wait()
        results = []
        for request in requests:
            self.requests.append(request)
            turn = self._take(request)
            if turn is not None:
                result = self._replay(request, turn)
            elif self.model is not None:
                result = await asyncio.to_thread(self._sample, request)
            else:
                raise ScriptExhausted(f"request {request.request_id}: script exhausted after {self._next} turns and no model")
            result.n_cached_prompt_tokens = self._cached(request.prompt_ids)
            self._cache = (self._cache + [list(request.prompt_ids) + result.token_ids])[-8:]
            results.append(result)
        return results

    def _take(self, request: GenerateRequest) -> Turn | None:
        if callable(self._script):
            return self._script(request)
        if self._next < len(self._script):
            self._next += 1
            return self._script[self._next - 1]
        return None

    def _cached(self, prompt: list[int]) -> int:
        """Longest common prefix with a cached sequence (binary search over C-speed slice compares)."""
        best = 0
        for seq in self._cache:
            if len(seq) <= len(prompt) and prompt[: len(seq)] == seq:  # the usual case: the prompt extends it
                best = max(best, len(seq))
                continue
            lo, hi = 0, min(len(seq), len(prompt))
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if seq[:mid] == prompt[:mid]:
                    lo = mid
                else:
                    hi = mid - 1
            best = max(best, lo)
        return best

    def _replay(self, request: GenerateRequest, turn: Turn) -> GenerateResult:
        p = request.params
        ids = list(turn) if isinstance(turn, list) else self.tokenizer.encode(turn, add_special_tokens=False)
        ids += p.stop_token_ids[:1]
        finish = "stop"
        if len(ids) > p.max_new_tokens:
            ids, finish = ids[: p.max_new_tokens], "length"
        vocab = len(self.tokenizer)
        logprobs, topk_ids, topk_logprobs = [], [], []
        for i, token in enumerate(ids):
            q = 0.35 + 0.6 * _unit(self.seed, request.request_id, i)  # q of the replayed token
            rest = [(1 - q) * 0.5 ** (j + 1) for j in range(max(0, p.n_top_logprobs - 1))]
            others = [(token + 1 + int(_unit(self.seed, token, j) * (vocab - 1))) % vocab for j in range(len(rest))]
            row = {token: q}
            for other, mass in zip(others, rest):
                row.setdefault(other, mass)
            ranked = sorted(row.items(), key=lambda kv: -kv[1])[: p.n_top_logprobs]
            logprobs.append(math.log(q))
            topk_ids.append([t for t, _ in ranked])
            topk_logprobs.append([math.log(m) for _, m in ranked])
        return GenerateResult(
            request_id=request.request_id, token_ids=ids, logprobs=logprobs, topk_ids=topk_ids,
            topk_logprobs=topk_logprobs, finish_reason=finish, weight_version=self._version,
        )

    def _sample(self, request: GenerateRequest) -> GenerateResult:
        """Token-by-token sampling with a KV cache; logprobs of softmax(logits / T) before top-p."""
        import torch

        p = request.params
        generator = torch.Generator().manual_seed(p.seed if p.seed is not None else int(_unit(self.seed, request.request_id) * 2**31))
        ids, logprobs, topk_ids, topk_logprobs, finish = [], [], [], [], "length"
        cache = kv_cache_name()
        with torch.no_grad():
            out = self.model(torch.tensor([request.prompt_ids]), use_cache=True)
            for _ in range(p.max_new_tokens):
                logits = out.logits[0, -1].float()
                logq = torch.log_softmax(logits / (p.temperature or 1.0), dim=-1)
                if p.temperature == 0:
                    token = int(torch.argmax(logits))
                else:
                    probs, order = torch.sort(logq.exp(), descending=True)
                    keep = (torch.cumsum(probs, 0) - probs) < p.top_p
                    pick = torch.multinomial(probs * keep, 1, generator=generator)
                    token = int(order[pick])
                values, top = torch.topk(logq, min(p.n_top_logprobs, logq.shape[0]))
                ids.append(token)
                logprobs.append(float(logq[token]))
                topk_ids.append(top.tolist())
                topk_logprobs.append(values.tolist())
                if token in p.stop_token_ids:
                    finish = "stop"
                    break
                out = self.model(torch.tensor([[token]]), use_cache=True, **{cache: getattr(out, cache)})
        return GenerateResult(
            request_id=request.request_id, token_ids=ids, logprobs=logprobs, topk_ids=topk_ids,
            topk_logprobs=topk_logprobs, finish_reason=finish, weight_version=self._version,
        )

    async def update_weights(self, weights: Mapping[str, Any] | Path, version: int) -> None:
        """Tag later requests with ``version``; load a state dict or HF directory into the model if any."""
        if self.model is not None:
            if isinstance(weights, Path):
                from transformers import AutoModelForCausalLM

                self.model = AutoModelForCausalLM.from_pretrained(weights).eval()
            else:
                self.model.load_state_dict(dict(weights))
        self._version = version

    async def pause(self) -> None:
        self._resumed.clear()

    async def resume(self) -> None:
        self._resumed.set()
