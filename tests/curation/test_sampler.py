"""The online task sampler (curation/sampler.py, issue 29): seeded draws, retirement, re-probes, metrics, resume."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from fireflash.config import ConfigError, load_config
from fireflash.curation.config import CurationConfig
from fireflash.curation.sampler import TaskSampler

pytestmark = pytest.mark.unit
SOLVED4, FAILED4, MIXED4 = [(True, 1.0)] * 4, [(False, 0.0)] * 4, [(True, 1.0), (False, 0.0)] * 2


def _sampler(cfg: CurationConfig | None = None, seed: int = 0, tasks=("easy", "hard", "mid")) -> TaskSampler:
    s = TaskSampler(tasks, cfg or CurationConfig(), group_size=4, seed=seed)
    # a 20-attempt probe: easy 20/20, hard 0/20, mid 10/20
    s.seed_probe([("easy", 20, 20, 1.0), ("hard", 0, 20, 0.0), ("mid", 10, 20, 0.5)])
    return s


def test_draws_go_where_a_group_has_signal():
    s = _sampler(CurationConfig(readmit_every_groups=0))
    drawn = Counter(s.draw(g) for g in range(300))
    # mid: P(signal) ≈ 0.87; easy and hard ≈ 0.16 under the posterior predictive: weights 0.43 vs 2e-5 (power 6)
    assert drawn["mid"] == 300, drawn
    thompson = _sampler(CurationConfig(readmit_every_groups=0, draw_estimate="thompson", draw_weight_power=4))
    drawn = Counter(thompson.draw(g) for g in range(300))
    assert drawn["mid"] >= 270, drawn
    assert drawn["easy"] + drawn["hard"] >= 1  # Thompson's spread: a wide draw now and then


def test_predictive_draw_weights_are_the_posterior_predictive_and_explore_the_unseen():
    cfg = CurationConfig(readmit_every_groups=0, draw_weight_power=1, open_group_power=0)
    s = _sampler(cfg, tasks=("easy", "hard", "mid", "unseen"))
    # unseen: Dirichlet(0.5, 0.5), P(zero) = 2 · (0.5·1.5·2.5·3.5)/(1·2·3·4) = 0.546875; mid: (10.5, 10.5) of 21
    p_unseen = 1 - 2 * (0.5 * 1.5 * 2.5 * 3.5) / 24
    p_mid = 1 - 2 * (10.5 * 11.5 * 12.5 * 13.5) / (21 * 22 * 23 * 24)
    assert 1 - s._zero_signal_estimate("unseen", None) == pytest.approx(p_unseen)
    assert 1 - s._zero_signal_estimate("mid", None) == pytest.approx(p_mid)
    drawn = Counter(s.draw(g) for g in range(4000))
    # power 1: draws in proportion to P(signal); easy and hard (20 alike of 21) ≈ 0.166 each
    p_easy = 1 - (20.5 * 21.5 * 22.5 * 23.5 + 0.5 * 1.5 * 2.5 * 3.5) / (21 * 22 * 23 * 24)
    total = p_unseen + p_mid + 2 * p_easy
    assert drawn["unseen"] / 4000 == pytest.approx(p_unseen / total, abs=0.025)
    assert drawn["mid"] / 4000 == pytest.approx(p_mid / total, abs=0.025)
    assert drawn["unseen"] > 2 * drawn["easy"]  # the uncertain task is explored, the known-easy one is not


def test_draws_are_deterministic_per_seed_and_group_id():
    a, b, c = _sampler(seed=3), _sampler(seed=3), _sampler(seed=4, tasks=("easy", "hard", "mid", "other"))
    seq_a = [a.draw(g) for g in range(50)]
    assert seq_a == [b.draw(g) for g in range(50)]
    assert seq_a != [c.draw(g) for g in range(50)]


def test_groups_still_sampling_spread_the_draws_over_alike_tasks():
    def draws(power: float) -> Counter:
        s = _sampler(CurationConfig(readmit_every_groups=0, open_group_power=power), tasks=("mid", "mid2"))
        s.seed_probe([("mid2", 10, 20, 0.5)])
        return Counter(s.draw(g, open_task_ids=["mid"]) for g in range(400))

    spread, ignored = draws(2.0), draws(0.0)
    assert spread["mid2"] > 3 * spread["mid"]  # weight ÷ (1 + 1)² for mid's open group
    assert abs(ignored["mid2"] - ignored["mid"]) < 80


def test_retirement_needs_consecutive_zero_signal_groups_of_one_kind():
    s = _sampler(CurationConfig(retire_after_groups=2))
    for g, results in enumerate([SOLVED4, FAILED4, SOLVED4]):  # kinds alternate: no streak of 2
        s.draw(g)
        s.settle(g, "mid", results)
    assert s.retired == []
    s.settle(3, "mid", SOLVED4)  # two all-solved in a row
    assert s.retired == ["mid"]
    assert s.metrics()["curation/retired_tasks"] == 1.0 and s.total["retired"] == 1
    assert all(s.draw(g) != "mid" for g in range(10, 21))  # draws 4 to 14: no re-probe due (every 16)


def test_retired_tasks_are_reprobed_every_k_groups_and_return_on_signal():
    s = _sampler(CurationConfig(retire_after_groups=1, readmit_every_groups=4))
    s.settle(100, "easy", SOLVED4)
    s.settle(101, "hard", FAILED4)
    assert s.retired == ["easy", "hard"]  # retired longest ago first
    drawn = [s.draw(g) for g in range(8)]
    assert drawn[3] == "easy" and drawn[7] == "easy"  # groups 4 and 8: the longest retired, still retired
    assert "hard" not in drawn[:3] + drawn[4:7]
    s.settle(3, "easy", SOLVED4)  # the re-probe found nothing: retired again, at the back of the line
    assert s.retired == ["hard", "easy"]
    s.settle(7, "hard", MIXED4)  # (a re-probe of hard) with signal: back in the pool
    assert s.retired == ["easy"]
    assert s.total["readmitted"] == 2


def test_every_task_retired_still_draws_the_oldest():
    s = _sampler(CurationConfig(retire_after_groups=1, readmit_every_groups=0), tasks=("easy",))
    s.settle(0, "easy", SOLVED4)
    assert s.draw(1) == "easy" and s.draw(2, open_task_ids={"easy"}) == "easy"


def test_uniform_mode_draws_the_given_task_predicts_and_retires_nothing():
    s = _sampler(CurationConfig(sampler="uniform", retire_after_groups=1))
    assert [s.draw(g, uniform_task_id="easy") for g in range(3)] == ["easy"] * 3
    for g in range(3):
        s.settle(g, "easy", SOLVED4)
    assert s.retired == []
    m = s.metrics()
    assert m["curation/zero_signal_share"] == 1.0 and m["curation/predicted_zero_signal_share"] > 0.7


def test_metrics_compare_predicted_with_actual_and_reset_the_window():
    s = _sampler()
    p_mid = s.rates.zero_signal_probability("mid", 0)
    p_easy = s.rates.zero_signal_probability("easy", 0)
    s.predicted |= {0: p_mid, 1: p_easy}  # as draw() records them
    s.settle(0, "mid", MIXED4)
    s.settle(1, "easy", SOLVED4)
    m = s.metrics()
    assert m["curation/zero_signal_share"] == 0.5
    assert m["curation/predicted_zero_signal_share"] == pytest.approx((p_mid + p_easy) / 2)
    assert m["curation/zero_signal_share_total"] == 0.5
    assert 0 <= m["curation/pool_pass_rate_p10"] <= m["curation/pool_pass_rate_p50"] <= m["curation/pool_pass_rate_p90"] <= 1
    m2 = s.metrics()
    assert "curation/zero_signal_share" not in m2 and m2["curation/zero_signal_share_total"] == 0.5


def test_state_resumes_exactly_and_a_rerun_queued_group_is_not_counted_twice():
    s = _sampler()
    for g in range(6):
        s.settle(g, s.draw(g), MIXED4 if g % 2 else FAILED4)
    s.draw(6)  # still sampling at the checkpoint
    saved = json.loads(json.dumps(s.state_dict(keep_group_ids=[5, 6])))  # 5 queued (settled), 6 sampling
    resumed = _sampler()
    resumed.load_state_dict(saved)
    assert resumed.rates.tasks == s.rates.tasks and resumed.total == s.total
    assert [resumed.draw(g) for g in range(7, 30)] == [s.draw(g) for g in range(7, 30)]
    resumed.settle(5, "mid", SOLVED4)  # the queued group rerun after the resume: already counted
    assert resumed.total["groups"] == 6
    resumed.settle(6, "mid", SOLVED4)  # the one that was sampling: counted, with its prediction
    assert resumed.total["groups"] == 7 and resumed.total["predicted"] > s.total["predicted"]


def test_config_fields_are_validated_with_their_path(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text('[runtime.curation]\nsampler = "greedy"\nhalf_life_versions = 0\n')
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert "runtime.curation.sampler" in str(e.value) and "runtime.curation.half_life_versions" in str(e.value)
    cfg = load_config(None, ["runtime.curation.sampler=uniform", "runtime.curation.retire_after_groups=5"])
    assert cfg.runtime.curation.sampler == "uniform" and cfg.runtime.curation.retire_after_groups == 5


def test_the_trained_group_discount_reaches_the_pass_rate_state():
    s = _sampler(CurationConfig(trained_group_discount=0.25))
    s.settle(0, "mid", MIXED4)  # probe 10 + 2 solved, 10 + 2 failed, then a quarter of each
    assert s.rates.tasks["mid"].counts == pytest.approx({"solved": 3.0, "0.0000": 3.0})
