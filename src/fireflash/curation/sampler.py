"""Draw the next group's task where the signal is (RECIPE.md §2, issue 29 deliverable 2).

    sampler = TaskSampler(task_ids, CurationConfig(), group_size=4, seed=0)   # PassRates inside, seed_probe(...)
    task_id = sampler.draw(group_id, open_task_ids={...}, uniform_task_id=...)   # the scheduler, per new group
    sampler.settle(group_id, task_id, [(solved, reward), ...])                  # the loop, per graded group
    sampler.doomed(task_id, [(solved, reward), ...])                             # the loop, per finished attempt
    sampler.weight_version = 7                                                   # the loop, after each step

Online draw (``sampler = "online"``), for each active (not retired) task: its chance of signal s = 1 − P(zero
signal), the posterior predictive of a group of G under its Dirichlet(α) state (``online.PassRates``;
``draw_estimate = "thompson"``: 1 − Σ_v π_v^G for one π ~ Dirichlet(α) instead), weight
max(s, min_draw_weight) ** draw_weight_power / (1 + its groups still sampling) ** open_group_power; pick a task in
proportion to the weights. The divisor spreads the groups in flight over comparable tasks (their outcomes are not
known yet) without forcing a zero-signal task in when only one task has signal.
A task seldom seen has a wide posterior, whose predictive puts its outcome nearer the middle than its few
observations do: that is the exploration, no extra bonus; the re-probes (below) add the rest. The predictive beats
Thompson's single draw here because a draw of a wide posterior lands near 0 or 1 as often as in the middle, which
both starves uncertain tasks and promotes lucky ones (benchmarks/curation.py). Each draw uses
``Random(seed, group_id)``, so a run and its resume draw alike.

Retirement: ``retire_after_groups`` consecutive zero-signal groups of one kind (all solved / all failed) retire a
task. Every ``readmit_every_groups`` new groups the task retired longest ago is drawn (a re-probe); a group with
signal puts it back in the pool, another zero-signal group retires it again at the back of the line. When every
task is retired, the oldest is re-probed.

Early stop (``early_stop``, deliverable 3): ``doomed`` says whether a group still sampling can be cancelled: at
least ``early_stop_min_finished_attempts`` of its attempts finished, all with one outcome, and P(signal) given them
and the task's state (``online.signal_probability_after``) below ``early_stop_signal_probability``. The scheduler
then cancels the rest (runtime/groups.py) and ``settle`` counts the group with its finished attempts and how many
were left unfinished. A cancelled group counts as zero-signal; ``curation/cancelled_groups`` and
``curation/cancelled_attempts`` count them.

Prediction: each drawn group records the posterior predictive P(zero signal) of its task (``PassRates``) at the
draw; ``metrics()`` compares their mean with what the settled groups did. The same happens under ``uniform``.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from fireflash.curation.config import CurationConfig
from fireflash.curation.online import PassRates, polya_zero_signal, sampled_zero_signal, signal_probability_after


class TaskSampler:
    """The task of each new group, the pool's outcome state, retirement and its metrics (one per run).

    Args:
        task_ids: the training pool after the static probe filter (non-empty).
        cfg: ``[runtime.curation]``.
        group_size: attempts per group, G.
        seed: the run's seed (``runtime.seed``).

    Raises:
        ValueError: an empty pool.
    """

    def __init__(self, task_ids: Iterable[str], cfg: CurationConfig, group_size: int, seed: int) -> None:
        self.task_ids = sorted(task_ids)
        if not self.task_ids:
            raise ValueError("the task pool is empty: check tasks.paths (and tasks.pool_manifest)")
        self.cfg, self.group_size, self.seed = cfg, group_size, seed
        self.rates = PassRates(self.task_ids, group_size, cfg.half_life_versions, cfg.prior_attempts,
                               cfg.trained_group_discount)
        self.weight_version = 0  # set by the loop after each step
        self.groups_drawn = 0
        self.groups_settled = 0
        self.predicted: dict[int, float] = {}  # open group id → P(zero signal) predicted at its draw
        self.settled_ids: set[int] = set()  # settled groups a resume may re-issue (queued, not yet trained)
        self.window = self._zero_counts()  # since the last metrics row
        self.total = self._zero_counts()  # whole run (restored on resume)

    @staticmethod
    def _zero_counts() -> dict[str, float]:
        return {"groups": 0, "zero_signal": 0, "predicted": 0.0, "retired": 0, "readmitted": 0, "cancelled": 0,
                "cancelled_attempts": 0}

    def seed_probe(self, probed: Iterable[tuple[str, int, int, float]]) -> None:
        """Seed the state from a probe manifest: ``(task_id, passes, attempts, mean_reward)`` per probed task."""
        for tid, passes, attempts, mean_reward in probed:
            self.rates.seed(tid, passes, attempts, mean_reward)

    @property
    def retired(self) -> list[str]:
        """Retired tasks, retired longest ago first."""
        states = self.rates.tasks
        return sorted((t for t in self.task_ids if states[t].retired_at is not None),
                      key=lambda t: (states[t].retired_at, t))

    def draw(self, group_id: int, open_task_ids: Iterable[str] = (), uniform_task_id: str | None = None,
             among: Collection[str] | None = None) -> str:
        """The task of new group ``group_id``; ``open_task_ids``: the task of each group still sampling; ``among``:
        draw only from these tasks (the source ``curation.mix.SourceMix`` chose; None: the whole pool).

        Under ``sampler = "uniform"`` it returns ``uniform_task_id`` (the scheduler's shuffled order) and only
        records the prediction.
        """
        self.groups_drawn += 1
        open_ids = Counter(open_task_ids)
        if self.cfg.sampler == "uniform" and uniform_task_id is not None:
            task_id = uniform_task_id
        else:
            task_id = self._draw_online(group_id, open_ids, among)
        self.predicted[group_id] = self.rates.zero_signal_probability(task_id, self.weight_version)
        return task_id

    def _draw_online(self, group_id: int, open_ids: Counter[str], among: Collection[str] | None = None) -> str:
        retired = [t for t in self.retired if among is None or t in among]
        states = self.rates.tasks
        active = [t for t in self.task_ids if states[t].retired_at is None and (among is None or t in among)]
        idle_retired = [t for t in retired if t not in open_ids]
        every = self.cfg.readmit_every_groups
        if idle_retired and (not active or (every and self.groups_drawn % every == 0)):
            self.window["readmitted"] += 1
            self.total["readmitted"] += 1
            return idle_retired[0]
        if not active:  # every task retired and re-probing already
            return retired[0]
        rng = random.Random(f"{self.seed}:{group_id}")
        weights = [
            max(1.0 - self._zero_signal_estimate(t, rng), self.cfg.min_draw_weight) ** self.cfg.draw_weight_power
            / (1 + open_ids[t]) ** self.cfg.open_group_power
            for t in active
        ]
        return rng.choices(active, weights)[0]

    def _zero_signal_estimate(self, task_id: str, rng: random.Random) -> float:
        """P(zero signal) a draw weighs: the posterior predictive, or one Thompson sample (``draw_estimate``)."""
        alphas = self.rates.alphas(task_id, self.weight_version).values()
        if self.cfg.draw_estimate == "thompson":
            return sampled_zero_signal(alphas, self.group_size, rng)
        return polya_zero_signal(alphas, self.group_size)

    def doomed(self, task_id: str, finished: Sequence[tuple[bool, float]]) -> bool:
        """Whether a group at ``task_id`` still sampling may be cancelled, given its ``finished`` attempts'
        ``(solved, reward)`` (the early-stop rule in the module docstring; always False with ``early_stop`` off)."""
        cfg = self.cfg
        if not cfg.early_stop or len(finished) < cfg.early_stop_min_finished_attempts or len(finished) >= self.group_size:
            return False
        p_signal = signal_probability_after(self.rates.alphas(task_id, self.weight_version), finished, self.group_size)
        return p_signal < cfg.early_stop_signal_probability

    def settle(self, group_id: int, task_id: str, results: Sequence[tuple[bool, float]], unfinished: int = 0) -> None:
        """Count a graded group (not one lost to infrastructure): update the state, streaks and retirement.

        ``unfinished``: attempts cancelled or never started because ``doomed`` said so (``results`` are then the
        finished ones, all alike). A group settled before a checkpoint and re-issued by ``--resume`` (it was
        queued, not trained) is not counted twice.
        """
        predicted = self.predicted.pop(group_id, None)
        if group_id in self.settled_ids:
            return
        self.settled_ids.add(group_id)
        kind = self.rates.record(task_id, results, self.weight_version)
        self.groups_settled += 1
        state = self.rates.tasks[task_id]
        for counts in (self.window, self.total):
            counts["groups"] += 1
            counts["zero_signal"] += kind != "signal"
            counts["predicted"] += predicted if predicted is not None else 0.0
            counts["cancelled"] += unfinished > 0
            counts["cancelled_attempts"] += unfinished
        if self.cfg.sampler != "online":  # the uniform baseline draws every task: nothing to retire
            return
        if kind == "signal":
            state.retired_at = None  # a re-probe with signal: back in the pool
        elif state.streak >= self.cfg.retire_after_groups or state.retired_at is not None:
            if state.retired_at is None:
                self.window["retired"] += 1
                self.total["retired"] += 1
            state.retired_at = self.groups_settled  # (again) at the back of the re-probe line

    def metrics(self) -> dict[str, float]:
        """A metrics row's ``curation/*`` keys: this window's and the run's zero-signal share, actual and
        predicted; retired / re-admitted counts; quantiles of the active pool's posterior pass rates. Resets
        the window."""
        w, t = self.window, self.total
        out = {
            "curation/retired_tasks": float(len(self.retired)),
            "curation/retired_total": float(t["retired"]),
            "curation/readmitted_total": float(t["readmitted"]),
            "curation/retired": float(w["retired"]),
            "curation/readmitted": float(w["readmitted"]),
            "curation/cancelled_groups": float(w["cancelled"]),
            "curation/cancelled_attempts": float(w["cancelled_attempts"]),
            "curation/cancelled_groups_total": float(t["cancelled"]),
            "curation/cancelled_attempts_total": float(t["cancelled_attempts"]),
        }
        if w["groups"]:
            out["curation/predicted_zero_signal_share"] = w["predicted"] / w["groups"]
            out["curation/zero_signal_share"] = w["zero_signal"] / w["groups"]
        if t["groups"]:
            out["curation/predicted_zero_signal_share_total"] = t["predicted"] / t["groups"]
            out["curation/zero_signal_share_total"] = t["zero_signal"] / t["groups"]
        active = [t for t in self.task_ids if self.rates.tasks[t].retired_at is None]
        rates = sorted(self.rates.pass_rate(t, self.weight_version) for t in active)
        if rates:
            q = statistics.quantiles(rates, n=10, method="inclusive") if len(rates) > 1 else [rates[0]] * 9
            out |= {"curation/pool_pass_rate_p10": q[0], "curation/pool_pass_rate_p50": q[4],
                    "curation/pool_pass_rate_p90": q[8]}
        self.window = self._zero_counts()
        return out

    def state_dict(self, keep_group_ids: Iterable[int] = ()) -> dict[str, Any]:
        """JSON-able state for the checkpoint cursor; ``keep_group_ids``: the groups a resume re-issues (only
        their settled marks are kept)."""
        keep = set(keep_group_ids)
        return {
            "tasks": self.rates.state_dict(), "groups_drawn": self.groups_drawn, "groups_settled": self.groups_settled,
            "total": dict(self.total), "settled_ids": sorted(self.settled_ids & keep),
            "predicted": {str(g): p for g, p in self.predicted.items() if g in keep},
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s output (a checkpoint cursor's ``curation``).

        Raises:
            ValueError: a malformed entry (names it).
        """
        self.rates.load_state_dict(saved.get("tasks", {}))
        self.groups_drawn = int(saved.get("groups_drawn", 0))
        self.groups_settled = int(saved.get("groups_settled", 0))
        self.total = self._zero_counts() | {k: v for k, v in saved.get("total", {}).items() if k in self.total}
        self.settled_ids = {int(g) for g in saved.get("settled_ids", [])}
        self.predicted = {int(g): float(p) for g, p in saved.get("predicted", {}).items()}
