"""Health metrics of the objective: drift per staleness bucket and the entropy-rise detector (RECIPE.md §5).

Notation: T policy-sampled positions.

Drift is mean |log π_θ(y_t) − log q(y_t)| (the recipe measured 0.065 at 1 version of staleness, 0.08 at
4–6). Buckets: ``0``, ``1``, ``2-3``, ``4-6`` and ``dropped`` for the default ``max_staleness`` 6 (the
upper buckets shrink or vanish for smaller values: 2 gives ``0``, ``1``, ``2``, ``dropped``); a bucket
with no token in this batch is left out of the dict rather than reported as NaN.

Entropy rise: policy entropy should fall slowly (reference 0.46 → 0.33 nats); a sustained rise is the
early warning. The detector compares the mean over the last ``window_steps`` steps with the lowest such
windowed mean seen earlier in the run, and warns when it is higher by more than ``rise_threshold`` nats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch


def staleness_buckets(max_staleness: int) -> list[tuple[str, int, int]]:
    """(name, lowest, highest) staleness of each bucket, in versions; ``dropped`` is open-ended."""
    bounds = [
        (lo, min(hi, max_staleness))
        for lo, hi in ((0, 0), (1, 1), (2, 3), (4, max_staleness))
        if lo <= max_staleness
    ]
    named = [(f"{lo}" if lo == hi else f"{lo}-{hi}", lo, hi) for lo, hi in bounds]
    return named + [("dropped", max_staleness + 1, torch.iinfo(torch.int64).max)]


def add_micro_batch_metrics(totals: dict[str, float], metrics: dict[str, float], share: float) -> None:
    """Accumulate one micro-batch's objective metrics into ``totals`` (in place), in summable form.

    ``tokens/*`` are counts and add up; ``drift/staleness_<b>`` is a mean over that bucket's tokens, so it is
    carried as drift × count until ``finish_micro_batch_metrics``; every other metric is a share or mean over
    the micro-batch's sampled tokens and is weighted by ``share``, its part of the step's sampled tokens. The
    forms add up across micro-batches and across data-parallel ranks alike.
    """
    for key, value in metrics.items():
        if key.startswith("tokens/"):
            weighted = value
        elif key.startswith("drift/staleness_"):
            weighted = value * metrics["tokens/staleness_" + key.removeprefix("drift/staleness_")]
        else:
            weighted = value * share
        totals[key] = totals.get(key, 0.0) + weighted


def finish_micro_batch_metrics(totals: dict[str, float]) -> dict[str, float]:
    """``totals`` from ``add_micro_batch_metrics`` (summed over micro-batches and ranks) with each bucket's drift
    divided by its token count again: the step's mean per bucket, however its tokens were split."""
    return {
        key: value / totals["tokens/staleness_" + key.removeprefix("drift/staleness_")]
        if key.startswith("drift/staleness_") else value
        for key, value in totals.items()
    }


def drift_by_staleness(
    policy_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, staleness: torch.Tensor, max_staleness: int
) -> dict[str, float]:
    """Mean |log π_θ − log q| per staleness bucket and the token count of each bucket.

    Shape: [T], [T], [T] int64 → ``{"drift/staleness_<bucket>": nats, "tokens/staleness_<bucket>": count}``.
    """
    gap = (policy_logprobs.detach().float() - rollout_logprobs.float()).abs()
    out: dict[str, float] = {}
    for name, lo, hi in staleness_buckets(max_staleness):
        in_bucket = (staleness >= lo) & (staleness <= hi)
        count = int(in_bucket.sum())
        if count:
            out[f"drift/staleness_{name}"] = gap[in_bucket].mean().item()
            out[f"tokens/staleness_{name}"] = float(count)
    return out


class EntropyRise(NamedTuple):
    """The detector's verdict after the latest step (entropies in nats).

    window_mean: mean entropy over the last ``window_steps`` steps (NaN before a full window).
    lowest_window_mean: the lowest full-window mean seen so far (NaN before a full window).
    rise: window_mean − lowest_window_mean (0.0 before a full window).
    warning: rise > rise_threshold.
    """

    window_mean: float
    lowest_window_mean: float
    rise: float
    warning: bool


def detect_entropy_rise(
    entropy_history: Sequence[float], window_steps: int, rise_threshold: float
) -> EntropyRise:
    """Entropy-rise early warning over the per-step mean entropies of a run (RECIPE.md §5 health signal).

    Args:
        entropy_history: mean policy entropy of every step so far, oldest first, nats.
        window_steps: steps averaged per window (>= 1).
        rise_threshold: nats above the lowest windowed mean that raise the warning (> 0).

    Raises:
        ValueError: window_steps < 1, rise_threshold <= 0 or a NaN entropy.
    """
    if window_steps < 1 or not rise_threshold > 0:
        raise ValueError(f"window_steps {window_steps} must be >= 1 and rise_threshold {rise_threshold} > 0")
    history = torch.tensor(list(entropy_history), dtype=torch.float64)
    if bool(history.isnan().any()):
        raise ValueError(f"entropy_history has NaN at step {int(history.isnan().nonzero()[0])}")
    if history.numel() < window_steps:
        return EntropyRise(float("nan"), float("nan"), 0.0, False)
    window_means = history.unfold(0, window_steps, 1).mean(-1)
    current, lowest = window_means[-1].item(), window_means.min().item()
    return EntropyRise(current, lowest, current - lowest, current - lowest > rise_threshold)
