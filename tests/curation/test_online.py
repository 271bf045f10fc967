"""The per-task outcome state of online curation (curation/online.py, issue 29): arithmetic by hand."""

from __future__ import annotations

import json
import random

import pytest

from fireflash.curation.online import (
    SOLVED,
    PassRates,
    group_kind,
    outcome_key,
    polya_zero_signal,
    sampled_zero_signal,
)

pytestmark = pytest.mark.unit


def test_polya_zero_signal_by_hand():
    # Dirichlet(1, 1) = a uniform p: P(two attempts agree) = ∫ p² + (1 − p)² dp = 2/3
    assert polya_zero_signal([1.0, 1.0], 2) == pytest.approx(2 / 3)
    # (2·3·4·5)/(4·5·6·7) + (2·3·4·5)/(4·5·6·7) with alphas (2, 2), G = 4: 2 · 120/840
    assert polya_zero_signal([2.0, 2.0], 4) == pytest.approx(2 * 120 / 840)


def test_many_binary_attempts_give_the_familiar_formula():
    p, g = 0.3, 4
    got = polya_zero_signal([3000.0 * p, 3000.0 * (1 - p)], g)
    assert got == pytest.approx(p**g + (1 - p) ** g, abs=2e-3)


def test_partial_reward_ties_are_zero_signal_and_counted_as_such():
    # unsolved attempts that all pass the same checks carry no GRPO signal: all R' = 0.5 · 0.4
    assert group_kind([(False, 0.4)] * 4) == "all_failed"
    assert group_kind([(True, 1.0), (True, 0.8)]) == "all_solved"  # R' = solve_reward whatever R
    assert group_kind([(False, 0.4), (False, 0.6)]) == "signal"
    assert outcome_key(True, 0.3) == SOLVED and outcome_key(False, 0.4) == "0.4000"
    # a task whose failures always tie: mostly zero signal, though its solve rate alone (0) would say "always"
    rates = PassRates(["t"], group_size=4, half_life_versions=1e9, prior_attempts=1.0)
    rates.record("t", [(False, 0.4)] * 4, version=0)
    rates.record("t", [(False, 0.4)] * 3 + [(True, 1.0)], version=0)
    a = rates.alphas("t", 0)
    assert a == {SOLVED: 1.5, "0.0000": 0.5, "0.4000": 7.0}
    assert rates.zero_signal_probability("t", 0) == pytest.approx(polya_zero_signal([1.5, 0.5, 7.0], 4))
    assert rates.pass_rate("t", 0) == pytest.approx(1.5 / 9.0)


def test_counts_decay_by_half_life_in_weight_versions():
    rates = PassRates(["t"], group_size=4, half_life_versions=2.0, prior_attempts=1.0)
    rates.record("t", [(True, 1.0)] * 4, version=3)
    assert rates.alphas("t", 3)[SOLVED] == pytest.approx(0.5 + 4)
    assert rates.alphas("t", 5)[SOLVED] == pytest.approx(0.5 + 2)  # one half-life later
    rates.record("t", [(False, 0.0)] * 4, version=7)  # stored counts decayed to version 7 first
    assert rates.alphas("t", 7) == pytest.approx({SOLVED: 0.5 + 1.0, "0.0000": 0.5 + 4.0})


def test_a_trained_group_discounts_its_tasks_counts_and_a_zero_signal_group_does_not():
    rates = PassRates(["t"], group_size=4, half_life_versions=1e9, prior_attempts=1.0, trained_group_discount=0.5)
    rates.record("t", [(True, 1.0)] * 4, version=0)  # all solved: nothing trained on, kept whole
    assert rates.tasks["t"].counts == {SOLVED: 4.0}
    rates.record("t", [(True, 1.0)] * 3 + [(False, 0.0)], version=1)  # trained on: (4 + 3, 1) halved
    assert rates.tasks["t"].counts == pytest.approx({SOLVED: 3.5, "0.0000": 0.5})
    assert rates.alphas("t", 1) == pytest.approx({SOLVED: 4.0, "0.0000": 1.0})
    with pytest.raises(ValueError, match="trained_group_discount"):
        PassRates(["t"], group_size=4, half_life_versions=1.0, prior_attempts=1.0, trained_group_discount=0.0)


def test_probe_manifest_seeds_solved_and_the_mean_partial_reward():
    rates = PassRates(["a", "b"], group_size=4, half_life_versions=10.0, prior_attempts=1.0)
    # 1 of 4 solved (R = 1), mean reward 0.55 → the 3 others average (2.2 − 1) / 3 = 0.4
    rates.seed("a", passes=1, attempts=4, mean_reward=0.55)
    rates.seed("gone", passes=2, attempts=4, mean_reward=0.5)  # filtered out of the pool: ignored
    assert rates.tasks["a"].counts == pytest.approx({SOLVED: 1.0, "0.4000": 3.0})
    assert rates.tasks["b"].counts == {} and "gone" not in rates.tasks


def test_streaks_count_consecutive_zero_signal_groups_of_one_kind():
    rates = PassRates(["t"], group_size=2, half_life_versions=5.0, prior_attempts=1.0)
    kinds = [rates.record("t", r, 0) for r in ([(True, 1)] * 2, [(True, 1)] * 2, [(False, 0)] * 2)]
    assert kinds == ["all_solved", "all_solved", "all_failed"]
    assert (rates.tasks["t"].streak_kind, rates.tasks["t"].streak) == ("all_failed", 1)
    rates.record("t", [(True, 1), (False, 0)], 0)
    assert (rates.tasks["t"].streak_kind, rates.tasks["t"].streak, rates.tasks["t"].zero_signal_groups) == (None, 0, 3)


def test_thompson_draw_is_seeded_and_near_the_posterior_when_certain():
    alphas = [4000.0, 4000.0]
    assert sampled_zero_signal(alphas, 4, random.Random(1)) == pytest.approx(2 * 0.5**4, abs=0.01)
    assert sampled_zero_signal([1, 2], 4, random.Random(5)) == sampled_zero_signal([1, 2], 4, random.Random(5))


def test_state_round_trips_through_json_and_bad_entries_are_named():
    rates = PassRates(["t", "u"], group_size=4, half_life_versions=5.0, prior_attempts=1.0)
    rates.record("t", [(False, 0.25), (True, 1.0)], version=2)
    again = PassRates(["t", "u", "new"], group_size=4, half_life_versions=5.0, prior_attempts=1.0)
    again.load_state_dict(json.loads(json.dumps(rates.state_dict() | {"dropped": {}})))
    assert again.tasks["t"] == rates.tasks["t"] and again.tasks["new"].counts == {}
    with pytest.raises(ValueError, match=r"curation.tasks\['t'\]"):
        again.load_state_dict({"t": {"counts": {}, "bogus": 1}})
    with pytest.raises(ValueError, match="non-finite"):
        again.load_state_dict({"t": {"counts": {SOLVED: float("nan")}}})
