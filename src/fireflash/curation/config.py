"""``[runtime.curation]``: how the run draws the task of each new group (RECIPE.md §2, issue 29)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CurationConfig(BaseModel):
    """Online curation knobs. The static probe filter (``tasks.pool_manifest``) applies first; these act on the
    pool it leaves. ``sampler = "uniform"`` keeps the seeded shuffled order (the A/B baseline); the pass-rate
    state and its metrics are kept in either mode, so a uniform run reports the same predictions."""

    model_config = ConfigDict(extra="forbid")

    sampler: Literal["online", "uniform"] = Field(
        "online", description="'online': draw a task by its chance of a group with signal (draw_estimate, "
        "curation/sampler.py); 'uniform': every task once per epoch in a seeded shuffle."
    )
    draw_estimate: Literal["predictive", "thompson"] = Field(
        "predictive", description="The chance of signal a draw weighs: 'predictive', the posterior predictive "
        "1 - P(zero signal) of each task (online.PassRates; an uncertain task's is pulled towards the middle, "
        "which is its exploration); 'thompson', 1 - sum_v pi_v^G for one pi ~ Dirichlet per task. benchmarks/"
        "curation.py, 30 steps, 20 seeds: 20.7 % vs 23.5 % zero-signal after step 10 on a probe-filtered pool, 27.9 % "
        "vs 32.8 % unfiltered (Thompson at its old power 4)."
    )
    half_life_versions: float = Field(
        20.0, gt=0, description="Weight versions after which a past attempt (probe or training) counts half in a "
        "task's pass-rate state: older policies say less about the current one."
    )
    trained_group_discount: float = Field(
        0.5, gt=0, le=1, description="After each group with signal (one GRPO trains on), multiply that task's "
        "counts by this: training on a task moves its rate faster than the pool's half life follows. On a "
        "simulated pool fitted to the local recipe's real A/B (benchmarks/curation.py --pool-manifest, --learn "
        "0.3) it brings the predicted zero-signal share from 16 to 6 points of the actual; 1: off."
    )
    prior_attempts: float = Field(
        1.0, gt=0, description="Pseudo-attempts of the Dirichlet prior, split evenly between 'solved' and "
        "'unsolved with reward 0'; the whole state of a task neither probed nor drawn yet."
    )
    retire_after_groups: int = Field(
        3, ge=1, description="Retire a task after this many consecutive zero-signal groups of the same kind (all "
        "solved, or all unsolved with equal reward)."
    )
    readmit_every_groups: int = Field(
        16, ge=0, description="Every this many new groups, the task retired longest ago is drawn once more (a "
        "re-probe): back in the pool if its group has signal, retired again otherwise. 0: never."
    )
    min_draw_weight: float = Field(
        0.02, ge=0, le=1, description="Floor of an active task's chance of signal in its draw weight (before the "
        "power), so a Thompson draw that lands at 0 or 1 does not zero a task out."
    )
    draw_weight_power: float = Field(
        6.0, gt=0, description="Draw weight = (estimated chance of signal, draw_estimate) ** this: 1 draws in "
        "proportion to it, higher concentrates the draws on the likeliest tasks (benchmarks/curation.py compares them)."
    )
    open_group_power: float = Field(
        2.0, ge=0, description="Draw weight divided by (1 + the task's groups still sampling) ** this: spreads the "
        "groups in flight over tasks whose outcomes are alike; 0 ignores them."
    )
    early_stop: bool = Field(
        False, description="Cancel the attempts of a group still sampling once its finished ones say it will carry "
        "no signal (online.signal_probability_after below early_stop_signal_probability, at least "
        "early_stop_min_finished_attempts finished, all alike); the group counts as zero-signal. Off by default: "
        "see curation/README.md for what it saves and how often it cancels a group that would have had signal."
    )
    early_stop_signal_probability: float = Field(
        0.05, gt=0, lt=1, description="Cancel when P(the group has signal | the task's state and its finished "
        "attempts) is below this. Of the cancelled groups, the share that would have had signal stays below it when "
        "attempts finish in an order unrelated to their outcome, and reaches about it when unsolved attempts run "
        "1.5x longer (benchmarks/curation.py)."
    )
    early_stop_min_finished_attempts: int = Field(
        2, ge=1, description="Finished attempts of the group itself needed before it may be cancelled: the evidence "
        "must include this group, not only the task's past."
    )
