"""Trajectories → supervised examples and micro-batches that share their common prompt prefix (issue #10).

An example is one segment: its token ids and ``loss_mask`` (1 exactly on assistant tokens the policy
would sample, 0 on system, user, tool results and the assistant prefix). Every oracle segment opens with
the same system prompt (~900 of its ~1,300 tokens with SmolLM2), so a micro-batch is split into the
longest prefix all its rows share — run once, without gradient — and right-padded suffixes that attend to
it. See ``SFTTrainer`` for what that changes in the gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fireflash.protocols import Trajectory
from fireflash.training.prefix import common_prefix_len


@dataclass(frozen=True)
class Example:
    """One supervised sequence: ``token_ids`` [T] and ``loss_mask`` [T] (1 = predict this token)."""

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    source: str  # e.g. "csv-sum-column.solve.direct"

    @property
    def n_loss_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass
class SFTMicroBatch:
    """Rows sharing ``prefix_ids`` [P]; ``suffix_ids`` [B, S] right-padded; ``labels`` [B, S] (-100 = no loss).

    ``labels[b, s]`` is the token to predict from the hidden state at suffix position ``s`` (already shifted).
    """

    prefix_ids: torch.Tensor
    suffix_ids: torch.Tensor
    labels: torch.Tensor

    @property
    def n_loss_tokens(self) -> int:
        return int((self.labels != -100).sum())


def examples_from(trajectories: Sequence[Trajectory]) -> list[Example]:
    """One ``Example`` per segment with at least one assistant token."""
    out = []
    for t in trajectories:
        o = t.metadata.get("oracle", {})
        name = ".".join(str(o.get(k, "")) for k in ("task_id", "solution", "variant")) if o else t.attempt_id
        for seg in t.segments:
            if seg.n_sampled_tokens:
                out.append(Example(tuple(seg.token_ids), tuple(seg.loss_mask), name))
    return out


def shared_prefix_len(examples: Sequence[Example], share: bool) -> int:
    """Tokens at the start all ``examples`` share, ending before any row's first predicted token.

    The hidden state that predicts token t sits at t - 1, so the prefix stops one short of the first
    loss position; at least one token stays in every suffix. ``share=False`` gives 0.
    """
    if not share:
        return 0
    n = common_prefix_len([e.token_ids for e in examples])
    first_loss = min((e.loss_mask.index(1) for e in examples if 1 in e.loss_mask), default=n + 1)
    return max(0, min(n, first_loss - 1, min(len(e.token_ids) for e in examples) - 1))


def make_micro_batch(examples: Sequence[Example], pad_id: int, share_prefix: bool) -> SFTMicroBatch:
    """Pack ``examples`` into one micro-batch (see ``SFTMicroBatch``)."""
    p = shared_prefix_len(examples, share_prefix)
    width = max(len(e.token_ids) for e in examples) - p
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for b, e in enumerate(examples):
        suffix = e.token_ids[p:]
        ids[b, : len(suffix)] = torch.tensor(suffix)
        # position s predicts token p + s + 1
        for s in range(len(suffix) - 1):
            if e.loss_mask[p + s + 1]:
                labels[b, s] = e.token_ids[p + s + 1]
    return SFTMicroBatch(torch.tensor(examples[0].token_ids[:p], dtype=torch.long), ids, labels)


def plan_micro_batches(examples: Sequence[Example], micro_batch_tokens: int, share_prefix: bool) -> list[list[Example]]:
    """Split ``examples`` (one optimizer step's worth) into micro-batches of at most ``micro_batch_tokens``.

    Longest first, so padding waste stays small. The budget counts rows × longest row (padding included)
    of the tokens that carry gradient: with ``share_prefix`` the prefix all ``examples`` share is run once
    without gradient and is not counted.

    Raises:
        ValueError: one example alone exceeds the budget (raise ``sft.micro_batch_tokens``).
    """
    if not examples:
        return []
    shared = shared_prefix_len(examples, share_prefix)
    order = sorted(examples, key=lambda e: -len(e.token_ids))
    batches: list[list[Example]] = []
    for e in order:
        if len(e.token_ids) - shared > micro_batch_tokens:
            raise ValueError(
                f"sft.micro_batch_tokens = {micro_batch_tokens} < an example of {len(e.token_ids) - shared} tokens "
                f"({e.source}); raise it to at least the harness context window"
            )
        if batches and (len(batches[-1]) + 1) * (len(batches[-1][0].token_ids) - shared) <= micro_batch_tokens:
            batches[-1].append(e)
        else:
            batches.append([e])
    return batches
