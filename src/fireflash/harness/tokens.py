"""The running token sequence of one segment and its prefix guard (DESIGN.md "The data that flows").

Each turn's prompt is the previous prompt + the sampled tokens + the rendered fragment; nothing is ever
re-rendered. ``SegmentBuilder`` only appends, and ``PrefixGuard`` checks every turn that the new prompt
extends the previous prompt and sampled tokens exactly. Separately, the sampled text is re-tokenized and
any difference from the sampled ids is recorded as *retokenization drift*: harmless here (the sampled
ids are kept), but it is what a re-rendering harness would silently corrupt.
"""

from __future__ import annotations

from typing import Any

from fireflash.protocols import GenerateResult, Segment

_NO_TOPK: list = []


class PrefixDrift(RuntimeError):
    """A new prompt does not extend the previous prompt + sampled tokens: the token history was rewritten."""


class SegmentBuilder:
    """Append-only per-token arrays of one segment (shapes [T], [T][K])."""

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.rollout_logprobs: list[float] = []
        self.topk_ids: list[list[int]] = []
        self.topk_logprobs: list[list[float]] = []
        self.weight_version: list[int] = []

    def __len__(self) -> int:
        return len(self.token_ids)

    def add_prompt(self, ids: list[int]) -> None:
        """Tokens the policy did not sample (system, task, tool results, assistant prefix): mask 0."""
        n = len(ids)
        self.token_ids.extend(ids)
        self.loss_mask.extend([0] * n)
        self.rollout_logprobs.extend([0.0] * n)
        # one shared empty row: never mutated here, copied by pydantic in to_segment; avoids n allocations
        self.topk_ids.extend([_NO_TOPK] * n)
        self.topk_logprobs.extend([_NO_TOPK] * n)
        self.weight_version.extend([-1] * n)

    def add_sampled(self, result: GenerateResult) -> None:
        """Tokens the policy sampled: mask 1 with their logprobs, top-k and weight version."""
        n = len(result.token_ids)
        if not (len(result.logprobs) == len(result.topk_ids) == len(result.topk_logprobs) == n):
            raise ValueError(
                f"engine result {result.request_id}: {n} tokens but {len(result.logprobs)} logprobs, "
                f"{len(result.topk_ids)} top-k rows; the engine must return one entry per sampled token"
            )
        self.token_ids.extend(result.token_ids)
        self.loss_mask.extend([1] * n)
        self.rollout_logprobs.extend(result.logprobs)
        self.topk_ids.extend(result.topk_ids)
        self.topk_logprobs.extend(result.topk_logprobs)
        self.weight_version.extend([result.weight_version] * n)

    def to_segment(self) -> Segment:
        return Segment(
            token_ids=self.token_ids, loss_mask=self.loss_mask, rollout_logprobs=self.rollout_logprobs,
            topk_ids=self.topk_ids, topk_logprobs=self.topk_logprobs, weight_version=self.weight_version,
        )


class PrefixGuard:
    """Checks that each turn's prompt extends the last prompt + its sampled tokens; records drift."""

    def __init__(self) -> None:
        self._prompt: list[int] = []  # the previous turn's prompt (the list sent to the engine; never mutated)
        self._sampled: list[int] = []  # and what was sampled on it
        self.drift: list[dict[str, Any]] = []

    def reset(self) -> None:
        """A new segment starts (compaction): there is no previous prompt to extend."""
        self._prompt, self._sampled = [], []

    def check(self, prompt: list[int], turn: int) -> None:
        """Record the turn's prompt after checking it extends the previous one.

        Raises:
            PrefixDrift: the prompt rewrote earlier tokens (a harness bug; the attempt fails loudly).
        """
        n, m = len(self._prompt), len(self._sampled)
        # slice compares of the same int objects run at C speed (~4 us per 1,000 tokens)
        if len(prompt) < n + m or prompt[:n] != self._prompt or prompt[n : n + m] != self._sampled:
            expected = self._prompt + self._sampled
            at = next((i for i, (a, b) in enumerate(zip(prompt, expected)) if a != b), min(n + m, len(prompt)))
            self.drift.append({"kind": "prefix", "turn": turn, "index": at})
            raise PrefixDrift(f"turn {turn}: prompt differs from the previous turn's tokens at index {at}")
        self._prompt, self._sampled = prompt, []

    def extend_last(self, sampled: list[int]) -> None:
        """The sampled tokens become part of the prefix the next prompt must extend."""
        self._sampled = list(sampled)

    def check_retokenization(self, sampled: list[int], renderer: Any, turn: int) -> None:
        """Record where re-tokenizing the sampled text would give other ids than the ones sampled.

        Args:
            sampled: [N] the turn's sampled ids (a final eos is ignored).
            renderer: provides ``encode(text)`` / ``decode(ids)`` and ``eos_id`` (a ``ChatRenderer``).
        """
        body = sampled[:-1] if sampled and sampled[-1] == renderer.eos_id else sampled
        again = renderer.encode(renderer.decode(body))
        if again != body:
            at = next((i for i, (a, b) in enumerate(zip(again, body)) if a != b), min(len(again), len(body)))
            self.drift.append({"kind": "retokenization", "turn": turn, "index": at, "n_sampled": len(body)})
