"""Group advantages against hand-worked groups (RECIPE.md §5). Population std throughout."""

import math

import pytest
import torch

from fireflash.rl.advantages import RewardError, batch_advantages, group_advantages
from fireflash.rl.config import ObjectiveConfig

pytestmark = pytest.mark.unit
CFG = ObjectiveConfig()


def _adv(rewards, solved, tokens, cfg=CFG):
    return group_advantages(torch.tensor(rewards), torch.tensor(solved), torch.tensor(tokens), cfg)


def test_all_fail_with_partial_credit():
    # R' = 0.5 R = [0, .1, .2, .3]; deviations ±.15, ±.05; var = .0125 = 1/80 → A = ±3/√5, ±1/√5
    g = _adv([0.0, 0.2, 0.4, 0.6], [False] * 4, [10, 20, 30, 40])
    s5 = math.sqrt(5)
    assert not g.zero_signal
    torch.testing.assert_close(
        g.advantages, torch.tensor([-3 / s5, -1 / s5, 1 / s5, 3 / s5], dtype=torch.float64)
    )


def test_one_solve_has_no_length_term():
    # R' = [1.5, .25, 0, 0], mean 7/16; deviations [17, -3, -7, -7]/16; var = 99/256 → A = dev·16/√99
    g = _adv([1.0, 0.5, 0.0, 0.0], [True, False, False, False], [900, 10, 20, 30])
    s = math.sqrt(99)
    torch.testing.assert_close(
        g.advantages, torch.tensor([17 / s, -3 / s, -7 / s, -7 / s], dtype=torch.float64)
    )


def test_two_solves_with_different_lengths_add_the_length_term():
    # R' = [1.5, 1.5, 0, 0] → ±1. b = [.2(1 - 100/200), 0, 0, 0] = [.1, 0, 0, 0], mean .025;
    # (b - mean b)/.5 = [.15, -.05, -.05, -.05]. Unsolved lengths (300 > 200) never enter b.
    g = _adv([1.0, 1.0, 0.0, 0.0], [True, True, False, False], [100, 200, 50, 300])
    torch.testing.assert_close(g.advantages, torch.tensor([1.15, 0.95, -1.05, -1.05], dtype=torch.float64))


def test_all_solve_is_discarded_even_with_different_lengths():
    g = _adv([1.0, 1.0, 1.0], [True, True, True], [100, 200, 300])
    assert g.zero_signal
    assert g.advantages.tolist() == [0.0, 0.0, 0.0]


def test_all_zero_is_discarded():
    g = _adv([0.0] * 12, [False] * 12, [5] * 12)
    assert g.zero_signal and g.advantages.abs().sum() == 0


@pytest.mark.parametrize("bad", [float("nan"), 1.5, -0.1, float("inf")])
def test_unusable_reward_names_the_attempt(bad):
    with pytest.raises(RewardError, match=r"group 0, attempt 2: reward"):
        _adv([0.0, 1.0, bad], [False, True, False], [1, 2, 3])


def test_round_off_spread_stays_tiny_under_the_std_floor():
    # 0.1 + 0.2 and 0.3 differ by one ulp; an unfloored std (~1e-17) would turn that into A = ±1
    rewards = torch.tensor([0.1 + 0.2, 0.3], dtype=torch.float64)
    g = group_advantages(rewards, torch.tensor([False, False]), torch.tensor([1, 1]), CFG)
    assert not g.zero_signal
    assert 0 < g.advantages.abs().max() < 1e-9


def test_constants_come_from_the_config():
    # solve 1.0, partial scale 1.0 (R' = R), length bonus max 0.4, scale 1.0, one solve suffices
    cfg = ObjectiveConfig(
        solve_reward=1.0,
        partial_reward_scale=1.0,
        length_bonus_max=0.4,
        length_bonus_min_solved=1,
        length_bonus_scale=1.0,
    )
    # R' = [1, 0]: ±1. b = [.4(1 - 50/50), 0] = [0, 0] → no length term with a single solve at max length
    g = _adv([1.0, 0.0], [True, False], [50, 10], cfg)
    torch.testing.assert_close(g.advantages, torch.tensor([1.0, -1.0], dtype=torch.float64))


def test_batch_metrics_count_zero_signal_groups():
    groups, m = batch_advantages(
        [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([1.0, 0.0])],
        [torch.tensor([True, False]), torch.tensor([False, False]), torch.tensor([True, False])],
        [torch.tensor([3, 4]), torch.tensor([3, 4]), torch.tensor([3, 4])],
        CFG,
    )
    assert [g.zero_signal for g in groups] == [False, True, False]
    assert m["groups/zero_signal_share"] == pytest.approx(1 / 3) and m["groups/n_zero_signal"] == 1
    # kept advantages: [1, -1, 1, -1]
    assert (m["advantage/mean"], m["advantage/std"], m["advantage/min"], m["advantage/max"]) == (
        0.0,
        1.0,
        -1.0,
        1.0,
    )


def test_mismatched_shapes_are_rejected():
    with pytest.raises(RewardError, match="group 0: rewards"):
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([True]), torch.tensor([1, 2]), CFG)
