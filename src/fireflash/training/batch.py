"""Pack a step's groups into token-budgeted micro-batches for the objective (RECIPE.md §5).

Each trajectory segment is one sequence. The trainer runs the model body on a right-padded micro-batch,
gathers the final hidden state at position t-1 for every policy-sampled token t (loss mask 1), and only
those rows go through the vocabulary projection. Per-attempt quantities (advantage, sampled-token count
for the loss floor) index the whole step's batch, so micro-batch losses add up to the step loss.

Notation: N attempts in the step, S sequences in a micro-batch, L its padded length, T sampled positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from fireflash.protocols import Group, Segment
from fireflash.rl.loss import PolicyBatch


class MicroBatch(NamedTuple):
    """One forward/backward pass.

    input_ids: [S, L] int64, right-padded with ``pad_id``.
    attention_mask: [S, L] int64, 1 on real tokens.
    rows: [T] int64 sequence index of each sampled position; cols: [T] int64 its position t - 1 (the
        hidden state that predicts token t).
    policy: the rollout side of the T positions (``attempt_index`` into the step's N attempts).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    policy: PolicyBatch


class BatchError(ValueError):
    """A step's data cannot be packed (empty, a segment over the micro-batch budget, missing advantages)."""


def _pack_lengths(lengths: list[int], budget_tokens: int) -> list[list[int]]:
    """Greedy packing of sequence indices, longest first, so that S * L <= budget_tokens per micro-batch."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        # padded cost is (members + 1) * longest member; the first member is the longest (sorted)
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _policy_rows(seg: Segment, k: int) -> tuple[list[int], list[list[int]], list[list[float]]]:
    positions = [t for t, m in enumerate(seg.loss_mask) if m and t > 0]
    ids = [(seg.topk_ids[t] + [0] * k)[:k] for t in positions]
    lps = [(seg.topk_logprobs[t] + [float("-inf")] * k)[:k] for t in positions]
    return positions, ids, lps


def pack_groups(groups: Sequence[Group], micro_batch_tokens: int, topk: int, pad_id: int) -> list[MicroBatch]:
    """Turn scored groups (with advantages) into micro-batches.

    Args:
        groups: groups that passed the zero-signal filter; ``advantages`` must be set.
        micro_batch_tokens: padded-token budget of one micro-batch (S * L).
        topk: K columns of the top-k tensors (short rows are padded with id 0 / log q = -inf).
        pad_id: token id used for padding.

    Raises:
        BatchError: no groups, a group without advantages, or a segment longer than the budget.
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
    for members in _pack_lengths([len(s.token_ids) for _, s in sequences], micro_batch_tokens):
        length = max(len(sequences[i][1].token_ids) for i in members)
        input_ids = torch.full((len(members), length), pad_id, dtype=torch.int64)
        mask = torch.zeros((len(members), length), dtype=torch.int64)
        rows, cols, targets, lp, tk_ids, tk_lps, versions, attempts = [], [], [], [], [], [], [], []
        for row, i in enumerate(members):
            attempt, seg = sequences[i]
            input_ids[row, : len(seg.token_ids)] = torch.tensor(seg.token_ids)
            mask[row, : len(seg.token_ids)] = 1
            positions, ids, lps = _policy_rows(seg, topk)
            rows += [row] * len(positions)
            cols += [t - 1 for t in positions]
            targets += [seg.token_ids[t] for t in positions]
            lp += [seg.rollout_logprobs[t] for t in positions]
            versions += [seg.weight_version[t] for t in positions]
            attempts += [attempt] * len(positions)
            tk_ids += ids
            tk_lps += lps
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
        out.append(MicroBatch(input_ids, mask, torch.tensor(rows, dtype=torch.int64), torch.tensor(cols, dtype=torch.int64), policy))
    return out
