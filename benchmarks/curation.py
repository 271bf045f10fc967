"""Zero-signal groups, uniform vs online curation, on a simulated task pool (issue 29; no model, no sandbox).

    .venv/bin/python benchmarks/curation.py [--quick] [--seeds 5] [--steps 60]
    .venv/bin/python benchmarks/curation.py --runs runs/ab-uniform runs/ab-online   # the same table from real runs

The pool imitates the local recipe's (README: `configs/local.toml`'s 40 generated tasks, no probe manifest, group
size 4, 2 trained groups per step, ~6 groups queued or sampling; the hour-long run: 110 of 192 groups zero-signal,
training pass rate 0.46 → 0.69 over 39 steps):

- the pool: 40 tasks whose true solve rates are drawn as a warm policy's are: 30 % near 0 (families it has not
  learned), 30 % near 1 (already learned), 40 % in between; an unsolved attempt passes some of the task's 3-6
  checks (partial reward), most often the task's usual count (``stuck`` share, the same near miss each time);
- ``--probe``: 60 candidates probed with 4 attempts each, kept in [15 %, 85 %] (RECIPE.md §2), the counts seed
  the online state (the manifest-filtered runs of README);
- learning drift: every trained group (one with signal) raises its task's logit solve rate by ``--learn`` and
  every task's by ``--transfer``, so trained tasks drift to 4/4 as in the real runs;
- asynchrony: a group is drawn while ``--inflight`` others are still sampling, and settles after them; a step
  (weight version) every 2 groups with signal (zero-signal groups are discarded: they cost time, not steps).

Both samplers see the same candidates, probe and seeds. Printed per sampler: zero-signal share over all groups and
after step 10, the sampler's predicted share after step 10 and the absolute error, the pass rate of the drawn
attempts in the first / last 10 steps, and retired / re-admitted counts.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fireflash.curation.config import CurationConfig
from fireflash.curation.online import group_kind
from fireflash.curation.sampler import TaskSampler

GROUP_SIZE, GROUPS_PER_STEP = 4, 2


class SimTask:
    """A task with a true solve rate (as a logit) and a partial-reward habit for unsolved attempts."""

    def __init__(self, rng: random.Random) -> None:
        u = rng.random()
        p = rng.betavariate(0.3, 6) if u < 0.3 else rng.betavariate(8, 1) if u < 0.6 else rng.betavariate(2, 2)
        p = min(max(p, 1e-3), 1 - 1e-3)
        self.logit = math.log(p / (1 - p))
        self.checks = rng.randint(3, 6)
        self.usual = rng.randrange(self.checks)  # checks an unsolved attempt usually passes
        self.stuck = rng.uniform(0.5, 0.95)

    @property
    def p(self) -> float:
        return 1 / (1 + math.exp(-self.logit))

    def attempt(self, rng: random.Random) -> tuple[bool, float]:
        if rng.random() < self.p:
            return True, 1.0
        passed = self.usual if rng.random() < self.stuck else rng.randrange(self.checks)
        return False, passed / self.checks


def simulate(
    sampler_kind: str, seed: int, steps: int, inflight: int, learn: float, transfer: float, probe: bool,
    cfg: CurationConfig,
) -> dict:
    world = random.Random(seed)
    candidates = {f"t{i:02d}": SimTask(world) for i in range(60 if probe else 40)}
    probe_rng = random.Random(seed + 1000)
    manifest = []
    for tid, task in candidates.items() if probe else ():
        outs = [task.attempt(probe_rng) for _ in range(4)]
        passes = sum(s for s, _ in outs)
        manifest.append((tid, passes, 4, statistics.fmean(r for _, r in outs)))
    kept = [tid for tid, passes, n, _ in manifest if 0.15 <= passes / n <= 0.85] if probe else sorted(candidates)
    tasks = {tid: candidates[tid] for tid in kept}
    sampler = TaskSampler(kept, cfg.model_copy(update={"sampler": sampler_kind}), GROUP_SIZE, seed)
    sampler.seed_probe(m for m in manifest if m[0] in tasks)
    order = sorted(kept)

    def uniform(gid: int) -> str:  # the scheduler's seeded shuffled order (runtime.groups.GroupScheduler)
        epoch, pos = divmod(gid, len(order))
        ids = list(order)
        random.Random(seed + epoch).shuffle(ids)
        return ids[pos]

    rng = random.Random(seed + 2000)
    open_groups: deque[tuple[int, str]] = deque()
    rows, gid, trained = [], 0, 0
    while sampler.weight_version < steps:
        while len(open_groups) < inflight:
            tid = sampler.draw(gid, {t for _, t in open_groups}, uniform(gid))
            open_groups.append((gid, tid))
            gid += 1
        g, tid = open_groups.popleft()
        predicted = sampler.predicted[g]
        results = [tasks[tid].attempt(rng) for _ in range(GROUP_SIZE)]
        sampler.settle(g, tid, results)
        zero = group_kind(results) != "signal"
        rows.append((sampler.weight_version, zero, predicted, statistics.fmean(s for s, _ in results)))
        if not zero:  # trained on: the task (and a little every task) gets easier
            tasks[tid].logit += learn
            for other in tasks.values():
                other.logit += transfer
            trained += 1
            if trained % GROUPS_PER_STEP == 0:
                sampler.weight_version += 1
                sampler.metrics()
    late = [r for r in rows if r[0] >= 10]
    return {
        "pool": len(kept),
        "zero_all": statistics.fmean(r[1] for r in rows),
        "zero_late": statistics.fmean(r[1] for r in late),
        "predicted_late": statistics.fmean(r[2] for r in late),
        "pass_first": statistics.fmean(r[3] for r in rows if r[0] < 10),
        "pass_last": statistics.fmean(r[3] for r in rows if r[0] >= steps - 10),
        "retired": sampler.total["retired"],
        "readmitted": sampler.total["readmitted"],
    }


def summarize_run(run_dir: str, after_step: int = 10) -> dict:
    """A real run's row of the table, from its metrics.jsonl (``fireflash train`` with either sampler)."""
    from fireflash.tracking import read_metrics

    rows = read_metrics(run_dir)
    late = [r for r in rows if r["step"] > after_step]

    def share(rs: list[dict], key: str) -> float:  # groups-weighted mean of a per-step share
        pairs = [(r[key], r["groups/done"] - r.get("groups/lost_to_infrastructure", 0.0)) for r in rs if key in r]
        total = sum(n for _, n in pairs)
        return sum(v * n for v, n in pairs) / total if total else math.nan

    def rate(rs: list[dict]) -> float:
        vals = [r["rollout/pass_rate"] for r in rs if "rollout/pass_rate" in r]
        return statistics.fmean(vals) if vals else math.nan

    return {
        "steps": len(rows), "zero_all": share(rows, "curation/zero_signal_share"),
        "zero_late": share(late, "curation/zero_signal_share"),
        "predicted_late": share(late, "curation/predicted_zero_signal_share"),
        "pass_first": rate(rows[:after_step]), "pass_last": rate(rows[-after_step:]),
        "retired": rows[-1].get("curation/retired_total", math.nan) if rows else math.nan,
        "readmitted": rows[-1].get("curation/readmitted_total", math.nan) if rows else math.nan,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 seeds × 40 steps")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps (2 groups each)")
    ap.add_argument("--inflight", type=int, default=5, help="groups sampling when a new one is drawn")
    ap.add_argument("--learn", type=float, default=0.15, help="logit gain of a task per trained group")
    ap.add_argument("--transfer", type=float, default=0.005, help="logit gain of every task per trained group")
    ap.add_argument("--probe", action="store_true", help="probe 60 candidates and keep 15-85 %% (else 40, unfiltered)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a [runtime.curation] field, e.g. --set draw_weight_power=1")
    ap.add_argument("--runs", nargs="+", metavar="RUN_DIR", help="summarise real runs instead of simulating")
    args = ap.parse_args()
    if args.runs:
        print(f"{'run':24} {'steps':>5} {'zero all':>9} {'zero >10':>9} {'pred >10':>9} {'pass 1st10':>10} "
              f"{'pass last10':>11} {'retired':>8} {'readmit':>8}")
        for run in args.runs:
            r = summarize_run(run)
            print(f"{run:24} {r['steps']:5d} {r['zero_all']:9.1%} {r['zero_late']:9.1%} {r['predicted_late']:9.1%} "
                  f"{r['pass_first']:10.2f} {r['pass_last']:11.2f} {r['retired']:8.0f} {r['readmitted']:8.0f}")
        return
    seeds, steps = (3, 40) if args.quick else (args.seeds, args.steps)
    cfg = CurationConfig(**dict(kv.split("=", 1) for kv in args.set))
    print(f"{seeds} seeds × {steps} steps × {GROUPS_PER_STEP} groups of {GROUP_SIZE}; {args.inflight} in flight; "
          f"learn {args.learn}, transfer {args.transfer}; {'probe-filtered' if args.probe else 'unfiltered'}; "
          f"{cfg.model_dump()}")
    header = f"{'sampler':8} {'pool':>5} {'zero all':>9} {'zero ≥10':>9} {'pred ≥10':>9} {'|err|':>6} " \
             f"{'pass 1st10':>10} {'pass last10':>11} {'retired':>8} {'readmit':>8}"
    print(header)
    # the pass rate of drawn attempts depends on what is drawn: uniform's is the pool's, online's favours the middle
    for kind in ("uniform", "online"):
        runs = [simulate(kind, s, steps, args.inflight, args.learn, args.transfer, args.probe, cfg) for s in range(seeds)]
        mean = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
        err = statistics.fmean(abs(r["predicted_late"] - r["zero_late"]) for r in runs)
        print(f"{kind:8} {mean['pool']:5.1f} {mean['zero_all']:9.1%} {mean['zero_late']:9.1%} "
              f"{mean['predicted_late']:9.1%} {err:6.1%} {mean['pass_first']:10.2f} {mean['pass_last']:11.2f} "
              f"{mean['retired']:8.1f} {mean['readmitted']:8.1f}")


if __name__ == "__main__":
    main()
