"""Per-task outcome state learned from training itself (RECIPE.md §2, issue 29 deliverable 1).

Each task keeps decayed counts of its attempts' outcomes, keyed by what GRPO compares: ``"solved"`` for a solved
attempt (R' = solve_reward whatever its partial reward), else the partial reward rounded to 4 decimals (R' =
partial_reward_scale × R). A group carries no signal exactly when all its attempts share one key. The counts plus
a small prior are the parameters α of a Dirichlet posterior over the task's outcome distribution π, so:

    P(zero signal) = Σ_v P(all G attempts land on v) = Σ_v Π_{k<G} (α_v + k) / (A + k),   A = Σ_v α_v

the posterior predictive of G new attempts (a Pólya urn). With binary rewards and many attempts it is the familiar
p^G + (1 − p)^G; with partial rewards it counts ties between unsolved attempts (all score 0.4) as zero signal
too, which 1 − p^G − (1 − p)^G would miss. Few observations make it lower (the outcome is uncertain), so a
task not seen for a while looks worth drawing again.

Decay: an attempt observed at weight version u counts 2^(−(v − u) / half_life_versions) at version v, so the
state follows the policy as it learns. Training on a task moves its own rate faster than a weight version moves
the pool's, so a group with signal (the one GRPO trains on) also multiplies the task's counts, its own included, by
``trained_group_discount``: what the task did before that update says less about it after. The probe manifest
seeds each task at version 0 (its passes as ``"solved"``, its other attempts at their mean partial reward: the
manifest keeps no per-attempt rewards).

The state is JSON-able (``state_dict``) and travels in the checkpoint's cursor, so ``--resume`` continues it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SOLVED = "solved"
ZeroKind = Literal["signal", "all_solved", "all_failed"]


def outcome_key(solved: bool, reward: float) -> str:
    """The outcome an attempt counts under: ``"solved"``, or its partial reward to 4 decimals (``"0.4000"``)."""
    return SOLVED if solved else f"{reward:.4f}"


def group_kind(results: Sequence[tuple[bool, float]]) -> ZeroKind:
    """``"signal"`` unless every attempt has the same outcome key: then ``"all_solved"`` or ``"all_failed"``."""
    keys = {outcome_key(s, r) for s, r in results}
    if len(keys) > 1:
        return "signal"
    return "all_solved" if keys == {SOLVED} else "all_failed"


def polya_zero_signal(alphas: Iterable[float], group_size: int) -> float:
    """P(a group of ``group_size`` attempts all share one outcome) under a Dirichlet(``alphas``) posterior."""
    alphas = [a for a in alphas if a > 0]
    total = sum(alphas)
    out = 0.0
    for a in alphas:
        p = 1.0
        for k in range(group_size):
            p *= (a + k) / (total + k)
        out += p
    return out


def signal_probability_after(alphas: dict[str, float], finished: Sequence[tuple[bool, float]], group_size: int) -> float:
    """P(a group of ``group_size`` has signal) given its ``finished`` attempts' ``(solved, reward)``, under the
    task's Dirichlet(``alphas``) posterior (outcome key → α; this group's attempts not yet counted in it).

    The early-stop rule's number (issue 29 deliverable 3). Finished attempts with two outcome keys: 1, the group has
    signal whatever comes. All k finished on key v: the group stays zero-signal only if the G − k still to come
    land on v too; with the k counted (the urn updated by what it just drew),

        P(no signal) = Π_{j < G − k} (α_v + k + j) / (A + k + j),   A = Σ α.

    No attempt finished: the prior predictive, 1 − ``polya_zero_signal``. All G finished: 0 (the group is decided).
    """
    keys = {outcome_key(s, r) for s, r in finished}
    if len(keys) > 1:
        return 1.0
    if not keys:
        return 1.0 - polya_zero_signal(alphas.values(), group_size)
    (key,) = keys
    k, a_v, total = len(finished), alphas.get(key, 0.0), sum(alphas.values())
    alike = 1.0
    for j in range(max(group_size - k, 0)):
        alike *= (a_v + k + j) / (total + k + j)
    return 1.0 - alike


def sampled_zero_signal(alphas: Iterable[float], group_size: int, rng: random.Random) -> float:
    """Σ_v π_v^G for one draw π ~ Dirichlet(``alphas``) (Thompson sampling's plausible outcome distribution)."""
    draws = [rng.gammavariate(a, 1.0) for a in alphas if a > 0]
    total = sum(draws)
    if total <= 0:  # every gamma draw underflowed (tiny alphas): the outcome is one of them, at random
        return 1.0
    return sum((d / total) ** group_size for d in draws)


@dataclass
class TaskState:
    """One task's state. ``counts`` are decayed to ``version``; the streak counts consecutive zero-signal groups."""

    counts: dict[str, float] = field(default_factory=dict)  # decayed attempts per outcome key
    version: int = 0  # weight version ``counts`` are decayed to
    streak_kind: str | None = None  # "all_solved" / "all_failed" of the current zero-signal streak
    streak: int = 0  # consecutive zero-signal groups of ``streak_kind``
    retired_at: int | None = None  # groups settled in the run when the task was (last) retired; None: active
    groups: int = 0  # groups settled for this task
    zero_signal_groups: int = 0


class PassRates:
    """Decayed Dirichlet outcome state of every task in the pool (see the module docstring).

    Args:
        task_ids: the training pool.
        group_size: attempts per group, G.
        half_life_versions: weight versions after which an observation counts half (> 0).
        prior_attempts: pseudo-attempts of the prior, half ``"solved"``, half ``"0.0000"`` (> 0).
        trained_group_discount: factor on a task's counts after each of its groups with signal, in (0, 1]; 1: none.

    Raises:
        ValueError: a non-positive half life or prior, or a discount outside (0, 1].
    """

    def __init__(self, task_ids: Iterable[str], group_size: int, half_life_versions: float, prior_attempts: float,
                 trained_group_discount: float = 1.0):
        if half_life_versions <= 0 or prior_attempts <= 0:
            raise ValueError(f"half_life_versions ({half_life_versions}) and prior_attempts ({prior_attempts}) must be > 0")
        if not 0 < trained_group_discount <= 1:
            raise ValueError(f"trained_group_discount ({trained_group_discount}) must be in (0, 1]")
        self.group_size, self.half_life, self.prior = group_size, half_life_versions, prior_attempts
        self.trained_group_discount = trained_group_discount
        self.tasks: dict[str, TaskState] = {tid: TaskState() for tid in task_ids}

    def seed(self, task_id: str, passes: int, attempts: int, mean_reward: float) -> None:
        """Count a probe result as attempts at version 0 (a task outside the pool is ignored: the filter dropped it)."""
        state = self.tasks.get(task_id)
        if state is None or attempts <= 0:
            return
        state.counts[SOLVED] = state.counts.get(SOLVED, 0.0) + passes
        if failed := attempts - passes:
            # solved attempts score R = 1; the rest share what remains of the mean (the manifest has no more)
            partial = min(max((mean_reward * attempts - passes) / failed, 0.0), 1.0)
            key = outcome_key(False, partial)
            state.counts[key] = state.counts.get(key, 0.0) + failed

    def _decayed(self, state: TaskState, version: int) -> dict[str, float]:
        factor = 0.5 ** (max(version - state.version, 0) / self.half_life)
        return {k: c * factor for k, c in state.counts.items()}

    def alphas(self, task_id: str, version: int) -> dict[str, float]:
        """Dirichlet parameters of ``task_id`` at weight ``version``: the prior plus the decayed counts."""
        out = {SOLVED: self.prior / 2, outcome_key(False, 0.0): self.prior / 2}
        for k, c in self._decayed(self.tasks[task_id], version).items():
            out[k] = out.get(k, 0.0) + c
        return out

    def zero_signal_probability(self, task_id: str, version: int) -> float:
        """Posterior predictive P(the next group of G at ``task_id`` has no signal) at weight ``version``."""
        return polya_zero_signal(self.alphas(task_id, version).values(), self.group_size)

    def pass_rate(self, task_id: str, version: int) -> float:
        """Posterior mean of the task's solve rate at weight ``version``."""
        a = self.alphas(task_id, version)
        return a[SOLVED] / sum(a.values())

    def record(self, task_id: str, results: Sequence[tuple[bool, float]], version: int) -> ZeroKind:
        """Add a graded group's ``(solved, reward)`` per attempt, sampled at about weight ``version``; returns
        the group's kind and updates the task's zero-signal streak. A group with signal then discounts the task's
        counts by ``trained_group_discount`` (the module docstring)."""
        state = self.tasks[task_id]
        state.counts = self._decayed(state, version)
        state.version = max(version, state.version)
        for solved, reward in results:
            key = outcome_key(solved, reward)
            state.counts[key] = state.counts.get(key, 0.0) + 1.0
        kind = group_kind(results)
        state.groups += 1
        if kind == "signal":
            state.streak_kind, state.streak = None, 0
            state.counts = {k: c * self.trained_group_discount for k, c in state.counts.items()}
        else:
            state.zero_signal_groups += 1
            state.streak = state.streak + 1 if state.streak_kind == kind else 1
            state.streak_kind = kind
        return kind

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state (the checkpoint cursor's ``curation.tasks``)."""
        return {tid: asdict(s) for tid, s in self.tasks.items()}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s output; tasks no longer in the pool are dropped, new ones start fresh.

        Raises:
            ValueError: an entry is not a task state (names the task and the field).
        """
        for tid, raw in saved.items():
            if tid not in self.tasks:
                continue
            try:
                self.tasks[tid] = TaskState(**raw)
            except TypeError as e:
                raise ValueError(f"checkpoint cursor curation.tasks[{tid!r}]: not a task state ({e}); resume with "
                                 "the FireFlash version that wrote it") from None
            if any(not math.isfinite(c) or c < 0 for c in self.tasks[tid].counts.values()):
                raise ValueError(f"checkpoint cursor curation.tasks[{tid!r}].counts: negative or non-finite count")
