"""Group advantages of success-shifted GRPO with a length bonus, and the zero-signal discard (RECIPE.md §5).

Notation: B groups in a batch, N attempts in a group.

    R'_i = solve_reward                  if attempt i solves the task      (default 1.5)
    R'_i = partial_reward_scale * R_i    otherwise                          (default 0.5)
    b_i  = length_bonus_max * (1 - tokens_i / max tokens among solved attempts)
           for solved attempts when at least length_bonus_min_solved attempts solve; otherwise 0
    A_i  = (R'_i - mean R') / max(std R', std_floor) + (b_i - mean b) / length_bonus_scale

Std convention: the *population* standard deviation (divide by N, ``unbiased=False``), so a group's
advantages do not depend on a Bessel factor that changes with the group size. A group whose R' are all
exactly equal carries no GRPO signal and is returned with ``zero_signal=True`` and zero advantages —
even when the length bonus differs (all-solved groups), as the recipe discards them. The floor only
guards groups whose R' differ by round-off (e.g. 0.5 * 0.3 vs 0.15): their advantages stay tiny instead
of being blown up to ±1. Arithmetic is float64 whatever the input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from fireflash.rl.config import ObjectiveConfig


class RewardError(ValueError):
    """A reward, solved flag or token count is unusable; the message names the group and attempt."""


class GroupAdvantages(NamedTuple):
    """Advantages of one group.

    advantages: [N] float64; all zeros when ``zero_signal``.
    zero_signal: every R' is equal, so the group must not reach the trainer.
    """

    advantages: torch.Tensor
    zero_signal: bool


def _check_group(rewards: torch.Tensor, solved: torch.Tensor, n_tokens: torch.Tensor, group: int) -> None:
    if not (rewards.dim() == 1 and rewards.shape == solved.shape == n_tokens.shape and rewards.numel() > 0):
        raise RewardError(
            f"group {group}: rewards {tuple(rewards.shape)}, solved {tuple(solved.shape)} and n_sampled_tokens "
            f"{tuple(n_tokens.shape)} must be equal non-empty 1-D shapes [N]"
        )
    for i, (r, t) in enumerate(zip(rewards.tolist(), n_tokens.tolist())):
        if not (math.isfinite(r) and 0.0 <= r <= 1.0):
            raise RewardError(
                f"group {group}, attempt {i}: reward {r} is not in [0, 1]; the grader must return a finite R in [0, 1]"
            )
        if t < 0:
            raise RewardError(f"group {group}, attempt {i}: n_sampled_tokens {t} is negative")


def group_advantages(
    rewards: torch.Tensor,
    solved: torch.Tensor,
    n_sampled_tokens: torch.Tensor,
    cfg: ObjectiveConfig,
    group: int = 0,
) -> GroupAdvantages:
    """Success-shifted GRPO advantages with the length bonus for one group (RECIPE.md §5).

    Args:
        rewards: [N] terminal rewards R in [0, 1].
        solved: [N] bool, the attempt solved the task.
        n_sampled_tokens: [N] policy-sampled tokens of each attempt (the length-bonus tokens).
        cfg: the constants (solve_reward, partial_reward_scale, length_bonus_*, std_floor).
        group: index used in error messages.

    Returns:
        ``GroupAdvantages`` with advantages [N] float64.

    Raises:
        RewardError: mismatched shapes, a NaN / infinite / out-of-range reward, or a negative token
            count; the message names the group and attempt.
    """
    _check_group(rewards, solved, n_sampled_tokens, group)
    r = rewards.detach().to(torch.float64)
    solved = solved.detach().to(torch.bool)
    shifted = torch.where(solved, torch.full_like(r, cfg.solve_reward), cfg.partial_reward_scale * r)
    if bool((shifted == shifted[0]).all()):
        return GroupAdvantages(torch.zeros_like(r), True)
    tokens = n_sampled_tokens.detach().to(torch.float64)
    bonus = torch.zeros_like(r)
    if int(solved.sum()) >= cfg.length_bonus_min_solved:
        longest = tokens[solved].max()
        if longest > 0:
            bonus = torch.where(solved, cfg.length_bonus_max * (1.0 - tokens / longest), bonus)
    std = shifted.std(unbiased=False).clamp_min(cfg.std_floor)
    advantages = (shifted - shifted.mean()) / std + (bonus - bonus.mean()) / cfg.length_bonus_scale
    return GroupAdvantages(advantages, False)


def batch_advantages(
    rewards: Sequence[torch.Tensor],
    solved: Sequence[torch.Tensor],
    n_sampled_tokens: Sequence[torch.Tensor],
    cfg: ObjectiveConfig,
) -> tuple[list[GroupAdvantages], dict[str, float]]:
    """``group_advantages`` for B groups (sizes may differ) plus the advantage metrics (RECIPE.md §5).

    Args:
        rewards, solved, n_sampled_tokens: B tensors of shape [N_b] each, as in ``group_advantages``.

    Returns:
        (per-group results, metrics): ``advantage/{mean,std,min,max}`` over attempts of kept groups
        (population std; 0.0 when every group is discarded), ``groups/zero_signal_share`` and
        ``groups/n_zero_signal``.

    Raises:
        RewardError: as ``group_advantages``, or when the three sequences differ in length.
    """
    if not len(rewards) == len(solved) == len(n_sampled_tokens):
        raise RewardError(
            f"{len(rewards)} reward groups, {len(solved)} solved groups, {len(n_sampled_tokens)} token groups"
        )
    results = [
        group_advantages(r, s, t, cfg, group=b)
        for b, (r, s, t) in enumerate(zip(rewards, solved, n_sampled_tokens))
    ]
    kept = [g.advantages for g in results if not g.zero_signal]
    n_zero = len(results) - len(kept)
    metrics = {
        "groups/n_zero_signal": float(n_zero),
        "groups/zero_signal_share": n_zero / max(len(results), 1),
    }
    flat = torch.cat(kept) if kept else torch.zeros(1, dtype=torch.float64)
    metrics |= {
        "advantage/mean": flat.mean().item(),
        "advantage/std": flat.std(unbiased=False).item(),
        "advantage/min": flat.min().item(),
        "advantage/max": flat.max().item(),
    }
    return results, metrics
