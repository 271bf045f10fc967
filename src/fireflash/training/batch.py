"""Pack a step's groups into token-budgeted micro-batches for the objective (RECIPE.md §5).

Each trajectory segment is one sequence. Sequences are ordered by their tokens, so attempts of one group
(same system prompt, same task turn) sit next to each other, and packed greedily: a micro-batch is the
longest prefix its rows share, run once (``training.prefix``, with gradient: exact), plus right-padded
suffixes. The trainer gathers the final hidden state at position t-1 for every policy-sampled token t
(loss mask 1), and only those rows go through the vocabulary projection. Per-attempt quantities
(advantage, sampled-token count for the loss floor) index the whole step's batch, so micro-batch losses
add up to the step loss.

Notation: N attempts in the step, S sequences in a micro-batch, P their shared prefix, L the padded
suffix length, T sampled positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from fireflash.protocols import Group, Segment
from fireflash.rl.loss import PolicyBatch
from fireflash.training.prefix import common_prefix_len


class MicroBatch(NamedTuple):
    """One forward/backward pass.

    prefix_ids: [P] int64 tokens every row starts with (P = 0 when they share none or sharing is off).
    input_ids: [S, L] int64 the rest of each row, right-padded with ``pad_id``.
    attention_mask: [S, L] int64, 1 on real tokens.
    rows: [T] int64 sequence index of each sampled position; cols: [T] int64 its position t - 1 - P in
        ``input_ids`` (the hidden state that predicts token t).
    policy: the rollout side of the T positions (``attempt_index`` into the step's N attempts).
    """

    prefix_ids: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    policy: PolicyBatch


class BatchError(ValueError):
    """A step's data cannot be packed (empty, a segment over the micro-batch budget, missing advantages)."""


class NoSampledTokens(BatchError):
    """A step's groups hold no policy-sampled token (loss mask 1): there is nothing to compute a gradient on."""


class AllTokensStale(NoSampledTokens):
    """Every policy-sampled token of a step is more than ``max_staleness`` versions behind the trainer: the loss
    masks them all (RECIPE.md §5), so there is no gradient either, yet AdamW's momentum would still move the
    weights and the version would still go up."""


def count_fresh_tokens(groups: Sequence[Group], trainer_version: int, max_staleness: int) -> tuple[int, int]:
    """(policy-sampled tokens, those at most ``max_staleness`` versions behind ``trainer_version``) of ``groups``.

    Counts the positions ``pack_groups`` trains (loss mask 1, after a segment's first position), as ``rl.loss``
    measures staleness: ``trainer_version - weight_version``.
    """
    sampled = fresh = 0
    for g in groups:
        for traj in g.trajectories:
            for seg in traj.segments:
                # tensors, not a Python loop per token: a cluster step holds ~10M tokens
                mask = torch.as_tensor(seg.loss_mask[1:], dtype=torch.bool)
                versions = torch.as_tensor(seg.weight_version[1:], dtype=torch.int64)[mask]
                sampled += int(versions.numel())
                fresh += int((trainer_version - versions <= max_staleness).sum())
    return sampled, fresh


def to_device(mb: MicroBatch, device: torch.device) -> MicroBatch:
    """``mb`` with every tensor on ``device`` (the same tensors when they are there already)."""
    policy = type(mb.policy)(*(t.to(device) for t in mb.policy))
    return MicroBatch(
        mb.prefix_ids.to(device), mb.input_ids.to(device), mb.attention_mask.to(device), mb.rows.to(device),
        mb.cols.to(device), policy,
    )


def _cost(prefix: int, rows: int, longest: int) -> int:
    """Tokens a micro-batch runs: the shared prefix once, then ``rows`` suffixes padded to the longest."""
    return prefix + rows * (longest - prefix)


def _plan(sequences: Sequence[Segment], budget_tokens: int, share_prefix: bool) -> list[tuple[list[int], int]]:
    """Greedy packing of sequence indices in token order: [(members, shared prefix length P)] within the budget.

    P stops before every member's first sampled position t0 (the hidden state at t0 - 1 predicts it, and
    only suffix hidden states are gathered); it is 0 without ``share_prefix``.
    """
    first = [next((t for t, m in enumerate(s.loss_mask) if m and t > 0), 1) for s in sequences]
    limit = [f - 1 if share_prefix else 0 for f in first]
    plan: list[tuple[list[int], int]] = []
    for i in sorted(range(len(sequences)), key=lambda i: sequences[i].token_ids):
        if plan:
            members, prefix = plan[-1]
            # in token order, the prefix all members share is the one the first shares with the newest
            prefix = min(prefix, limit[i], common_prefix_len([sequences[members[0]].token_ids, sequences[i].token_ids]))
            longest = max(len(sequences[j].token_ids) for j in (*members, i))
            if _cost(prefix, len(members) + 1, longest) <= budget_tokens:
                plan[-1] = ([*members, i], prefix)
                continue
        plan.append(([i], limit[i]))
    return plan


def _policy_rows(seg: Segment, k: int) -> tuple[list[int], list[list[int]], list[list[float]]]:
    positions = [t for t, m in enumerate(seg.loss_mask) if m and t > 0]
    ids = [(seg.topk_ids[t] + [0] * k)[:k] for t in positions]
    lps = [(seg.topk_logprobs[t] + [float("-inf")] * k)[:k] for t in positions]
    return positions, ids, lps


def pack_groups(
    groups: Sequence[Group], micro_batch_tokens: int, topk: int, pad_id: int, share_prefix: bool = True
) -> list[MicroBatch]:
    """Turn scored groups (with advantages) into micro-batches.

    Args:
        groups: groups that passed the zero-signal filter; ``advantages`` must be set.
        micro_batch_tokens: token budget of one micro-batch: P + S * L (the shared prefix once, then the
            padded suffixes); S * L without ``share_prefix``.
        topk: K columns of the top-k tensors (short rows are padded with id 0 / log q = -inf).
        pad_id: token id used for padding.
        share_prefix: run the prefix rows share once (exact; ``TrainerConfig.share_prefix``).

    Raises:
        BatchError: no groups, a group without advantages, or a segment longer than the budget.
        NoSampledTokens: no segment has a policy-sampled token after its first position.
    """
    if not groups:
        raise BatchError("no groups to train on")
    sequences: list[tuple[int, Segment]] = []
    advantages: list[float] = []
    n_sampled: list[int] = []
    for g in groups:
        if g.advantages is None:
            raise BatchError(f"group {g.task_id} has no advantages; compute them before training")
        for traj, adv in zip(g.trajectories, g.advantages):
            attempt = len(advantages)
            advantages.append(adv)
            n_sampled.append(traj.n_sampled_tokens)
            sequences += [(attempt, seg) for seg in traj.segments if seg.n_sampled_tokens]
    too_long = [len(s.token_ids) for _, s in sequences if len(s.token_ids) > micro_batch_tokens]
    if too_long:
        raise BatchError(
            f"a segment of {max(too_long)} tokens exceeds training.micro_batch_tokens={micro_batch_tokens}; "
            f"raise it to at least harness.context_window_tokens"
        )
    adv_t = torch.tensor(advantages, dtype=torch.float64)
    n_t = torch.tensor(n_sampled, dtype=torch.int64)
    out = []
    for members, p in _plan([s for _, s in sequences], micro_batch_tokens, share_prefix):
        length = max(len(sequences[i][1].token_ids) for i in members) - p
        input_ids = torch.full((len(members), length), pad_id, dtype=torch.int64)
        mask = torch.zeros((len(members), length), dtype=torch.int64)
        rows, cols, targets, lp, tk_ids, tk_lps, versions, attempts = [], [], [], [], [], [], [], []
        for row, i in enumerate(members):
            attempt, seg = sequences[i]
            input_ids[row, : len(seg.token_ids) - p] = torch.tensor(seg.token_ids[p:])
            mask[row, : len(seg.token_ids) - p] = 1
            positions, ids, lps = _policy_rows(seg, topk)
            rows += [row] * len(positions)
            cols += [t - 1 - p for t in positions]
            targets += [seg.token_ids[t] for t in positions]
            lp += [seg.rollout_logprobs[t] for t in positions]
            versions += [seg.weight_version[t] for t in positions]
            attempts += [attempt] * len(positions)
            tk_ids += ids
            tk_lps += lps
        prefix = torch.tensor(sequences[members[0]][1].token_ids[:p], dtype=torch.int64)
        policy = PolicyBatch(
            target_ids=torch.tensor(targets, dtype=torch.int64),
            rollout_logprobs=torch.tensor(lp, dtype=torch.float32),
            topk_ids=torch.tensor(tk_ids, dtype=torch.int64).reshape(len(targets), topk),
            topk_logprobs=torch.tensor(tk_lps, dtype=torch.float32).reshape(len(targets), topk),
            weight_version=torch.tensor(versions, dtype=torch.int64),
            attempt_index=torch.tensor(attempts, dtype=torch.int64),
            advantages=adv_t,
            n_sampled_tokens=n_t,
        )
        out.append(MicroBatch(prefix, input_ids, mask, torch.tensor(rows, dtype=torch.int64), torch.tensor(cols, dtype=torch.int64), policy))
    if not any(mb.policy.target_ids.numel() for mb in out):
        raise NoSampledTokens(
            f"{len(groups)} group(s), {len(advantages)} attempts: no policy-sampled token (loss mask 1) to train on; "
            "an optimizer step would change nothing but the weight version"
        )
    return out
