"""Staleness buckets and the entropy-rise detector (RECIPE.md §5 health signals)."""

import math

import pytest
import torch

from fireflash.rl.metrics import detect_entropy_rise, drift_by_staleness, staleness_buckets

pytestmark = pytest.mark.unit


def test_buckets_follow_the_recipe_and_shrink_with_max_staleness():
    assert [b[0] for b in staleness_buckets(6)] == ["0", "1", "2-3", "4-6", "dropped"]
    assert [b[:3] for b in staleness_buckets(2)][:3] == [("0", 0, 0), ("1", 1, 1), ("2", 2, 2)]
    assert staleness_buckets(0)[-1][:2] == ("dropped", 1)


def test_drift_is_mean_absolute_gap_per_bucket():
    # staleness [0, 0, 2, 3, 9] with gaps [.1, .3, .2, .4, 1] → 0: .2, 2-3: .3, dropped: 1
    policy = torch.tensor([-1.1, -0.7, -1.2, -0.6, -2.0])
    m = drift_by_staleness(policy, torch.full((5,), -1.0), torch.tensor([0, 0, 2, 3, 9]), 6)
    assert m == pytest.approx(
        {
            "drift/staleness_0": 0.2,
            "tokens/staleness_0": 2,
            "drift/staleness_2-3": 0.3,
            "tokens/staleness_2-3": 2,
            "drift/staleness_dropped": 1.0,
            "tokens/staleness_dropped": 1,
        }
    )


def test_entropy_rise_warns_only_after_a_rise_above_the_threshold():
    history = [0.46, 0.44, 0.42, 0.40, 0.45, 0.50]
    # window 2 means: .45, .43, .41, .425 → rise .015 (quiet); then .475 → rise .065 > .05 (warning)
    quiet = detect_entropy_rise(history[:5], window_steps=2, rise_threshold=0.05)
    assert quiet.rise == pytest.approx(0.015) and not quiet.warning
    loud = detect_entropy_rise(history, window_steps=2, rise_threshold=0.05)
    assert (loud.window_mean, loud.lowest_window_mean, loud.rise) == pytest.approx((0.475, 0.41, 0.065))
    assert loud.warning


def test_slow_fall_and_short_history_never_warn():
    falling = detect_entropy_rise([0.46 - 0.01 * i for i in range(14)], window_steps=10, rise_threshold=0.05)
    assert falling.rise == 0.0 and not falling.warning
    short = detect_entropy_rise([0.4, 0.9], window_steps=10, rise_threshold=0.05)
    assert math.isnan(short.window_mean) and not short.warning


def test_bad_detector_input_is_named():
    with pytest.raises(ValueError, match="entropy_history has NaN at step 1"):
        detect_entropy_rise([0.4, float("nan")], 2, 0.05)
    with pytest.raises(ValueError, match="window_steps 0 must be >= 1"):
        detect_entropy_rise([0.4], 0, 0.05)
