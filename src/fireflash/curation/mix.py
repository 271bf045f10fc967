"""Which task source each new group comes from, by the weights of ``[tasks.mix]`` (RECIPE.md §2, issue 30).

    mix = SourceMix({"agentic": ["t1", "t2"], "swe": ["s1"]}, {"agentic": 0.52, "swe": 0.48}, seed=0)
    source = mix.draw(group_id)           # the scheduler, per new group; then the task within the source
    mix.count_trained(["s1", "t2"])       # the loop, per optimizer step: the source of each trained group
    row |= mix.metrics()                  # mix/<source>/{weight,drawn,trained,drawn_share,trained_share}

The draw is deficit-based (smooth weighted round robin), not i.i.d.: group n goes to the source furthest
behind its target, argmax_s w_s·(n + 1) − drawn_s, ties broken by ``Random(seed, group_id)``. Every source
then stays within one group of its target at every n (|drawn_s − w_s·n| < 1; tested for 2 to 5 sources over
2,000 draws), where i.i.d. draws wander by ~√(w(1−w)n) groups (±10 of 400 at 50/50), so a short run's
mix is the configured one and each optimizer step's batch is as close to it as a whole number of groups
allows. The draw depends only on the counts and the seed, never on outcomes: a resumed run (counts restored
from the checkpoint cursor) draws exactly the sequence the uninterrupted run would have.

The weights apply to groups *drawn*; groups that end zero-signal or lost never reach the trainer, so the
trained share can differ (a harder source loses more groups): both are reported.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fireflash.protocols import Task


class SourceMix:
    """The source of each new group and the per-source counts (one per run; its state rides in the cursor).

    Args:
        task_ids: source name → the ids of its tasks in the pool (each non-empty; an id in one source only).
        weights: source name → weight > 0 (any sum; normalised here, so 52 / 48 means 0.52 / 0.48).
        seed: the run's seed (``runtime.seed``), for ties.

    Raises:
        ValueError: sources and weights differ, a weight is not > 0, a source has no task, or a task id is in
            two sources (each message names the source and the fix).
    """

    def __init__(self, task_ids: Mapping[str, Sequence[str]], weights: Mapping[str, float], seed: int) -> None:
        if set(task_ids) != set(weights) or not weights:
            raise ValueError(f"task sources {sorted(task_ids)} and weighted sources {sorted(weights)} differ; "
                             "give every [tasks.mix] source its paths and weight")
        for name, w in weights.items():
            if not w > 0:
                raise ValueError(f"tasks.mix.{name}.weight = {w}: must be > 0; drop the source to leave it out")
        self.sources = sorted(weights)
        total = sum(weights.values())
        self.weights = {s: weights[s] / total for s in self.sources}
        self.task_ids = {s: sorted(task_ids[s]) for s in self.sources}
        self._source_of: dict[str, str] = {}
        for s in self.sources:
            if not self.task_ids[s]:
                raise ValueError(f"tasks.mix.{s}: no task in the pool; check its paths (and tasks.pool_manifest)")
            for tid in self.task_ids[s]:
                if tid in self._source_of:
                    raise ValueError(f"task {tid!r} is in tasks.mix.{self._source_of[tid]} and tasks.mix.{s}; "
                                     "list it under one source")
                self._source_of[tid] = s
        self.seed = seed
        self.drawn = dict.fromkeys(self.sources, 0)  # whole run (restored on resume)
        self.trained = dict.fromkeys(self.sources, 0)
        self._window_drawn = dict.fromkeys(self.sources, 0)  # since the last metrics row
        self._window_trained = dict.fromkeys(self.sources, 0)

    @classmethod
    def from_tasks(cls, tasks: Iterable[Task], weights: Mapping[str, float], seed: int) -> SourceMix:
        """A mix over ``tasks`` grouped by ``task.metadata["source"]`` (set by ``curation.pool.load_mix_pool``).

        Raises:
            ValueError: a task without a source, or as the constructor.
        """
        by_source: dict[str, list[str]] = {s: [] for s in weights}
        for t in tasks:
            source = t.metadata.get("source")
            if source not in by_source:
                raise ValueError(f"task {t.id!r} has source {source!r}, not one of tasks.mix's {sorted(weights)}; "
                                 "load the pool with curation.pool.load_mix_pool")
            by_source[source].append(t.id)
        return cls(by_source, weights, seed)

    def source_of(self, task_id: str) -> str:
        """The source a pool task belongs to (KeyError for a task outside the pool)."""
        return self._source_of[task_id]

    def draw(self, group_id: int) -> str:
        """The source of new group ``group_id``: the one furthest behind its weight (module docstring)."""
        n = sum(self.drawn.values())
        deficit = {s: self.weights[s] * (n + 1) - self.drawn[s] for s in self.sources}
        best = max(deficit.values())
        tied = [s for s in self.sources if deficit[s] >= best - 1e-9]
        source = tied[0] if len(tied) == 1 else random.Random(f"{self.seed}:mix:{group_id}").choice(tied)
        self.drawn[source] += 1
        self._window_drawn[source] += 1
        return source

    def count_trained(self, task_ids: Iterable[str]) -> None:
        """Count the groups of one optimizer step's batch by source (their task ids)."""
        for tid in task_ids:
            source = self._source_of[tid]
            self.trained[source] += 1
            self._window_trained[source] += 1

    def metrics(self) -> dict[str, float]:
        """A metrics row's ``mix/<source>/*`` keys: ``weight`` (normalised target), ``drawn`` / ``trained`` (groups
        drawn since the last row / in this step's batch), ``drawn_share`` / ``trained_share`` (the run's cumulative
        shares, absent until a group was drawn / trained). Resets the window."""
        out: dict[str, float] = {}
        n_drawn, n_trained = sum(self.drawn.values()), sum(self.trained.values())
        for s in self.sources:
            out[f"mix/{s}/weight"] = self.weights[s]
            out[f"mix/{s}/drawn"] = float(self._window_drawn[s])
            out[f"mix/{s}/trained"] = float(self._window_trained[s])
            if n_drawn:
                out[f"mix/{s}/drawn_share"] = self.drawn[s] / n_drawn
            if n_trained:
                out[f"mix/{s}/trained_share"] = self.trained[s] / n_trained
        self._window_drawn = dict.fromkeys(self.sources, 0)
        self._window_trained = dict.fromkeys(self.sources, 0)
        return out

    def state_dict(self) -> dict[str, Any]:
        """JSON-able run counts for the checkpoint cursor (``cursor["mix"]``)."""
        return {"drawn": dict(self.drawn), "trained": dict(self.trained)}

    def load_state_dict(self, saved: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``'s counts. A source the saved run did not have starts at 0; a saved source no
        longer in the mix is dropped (its groups no longer count toward any share)."""
        for key, counts in (("drawn", self.drawn), ("trained", self.trained)):
            for s, n in dict(saved.get(key, {})).items():
                if s in counts:
                    counts[s] = int(n)
