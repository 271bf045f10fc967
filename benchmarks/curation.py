"""Zero-signal groups, uniform vs online curation, on a simulated task pool (issue 29; no model, no sandbox).

    .venv/bin/python benchmarks/curation.py [--quick] [--seeds 5] [--steps 60] [--modes uniform online online+stop]
    .venv/bin/python benchmarks/curation.py --runs runs/ab-uniform runs/ab-online   # the same table from real runs
    .venv/bin/python benchmarks/curation.py --manifests PROBE.json REPROBE-A.json ...  # pass rates, same tasks

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
- asynchrony: ``--inflight`` groups sample at once, each with its G attempts running side by side; an attempt takes
  lognormal(0, ``--duration-sigma``) time units, an unsolved one ``--fail-slower`` times more (it runs into its
  turn budget), so the quick outcomes, mostly solved ones, finish first. A group settles when its last attempt
  finishes, and a new one opens in its place; a step (weight version) every 2 groups with signal (zero-signal
  groups are discarded: they cost time, not steps);
- early stop (``online+stop``: ``early_stop = true``): after each finished attempt the group may be cancelled
  (``TaskSampler.doomed``); its running attempts stop there. Each group's G outcomes are drawn when it opens, so
  a cancelled group that would have had signal is known: a false cancel.

Every mode sees the same candidates, probe and seeds. Printed per mode (means over seeds): zero-signal share of the
groups over all and after step 10 (a cancelled group counts as zero-signal), the predicted share after step 10 and
the absolute error; ``waste≥10``: the share of rollout compute (attempt-time, a cancelled attempt's up to its
cancellation) spent after step 10 on groups that gave no gradient; ``true p``: the pool's mean solve rate at the
start → at the end (what training achieved, whatever was drawn); the pass rate of the drawn attempts in the first
/ last 10 steps; simulated time and compute to reach the steps; cancelled groups (share of all groups), false
cancels (share of the cancelled), signal lost (false cancels as a share of all groups), cut (attempt-time the
cancellations cut, share of the compute without the cut); retired / re-admitted.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
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

    @classmethod
    def binary(cls, p: float) -> "SimTask":
        """A pass/fail task (unsolved attempts score 0), as the local recipe's generated tasks are."""
        task = cls.__new__(cls)
        p = min(max(p, 1e-3), 1 - 1e-3)
        task.logit, task.checks, task.usual, task.stuck = math.log(p / (1 - p)), 1, 0, 1.0
        return task

    @property
    def p(self) -> float:
        return 1 / (1 + math.exp(-self.logit))

    def zero_signal(self, group_size: int) -> float:
        """The true P(all ``group_size`` attempts share one outcome): what the ``oracle`` mode draws by."""
        fail = [(self.stuck if k == self.usual else 0.0) + (1 - self.stuck) / self.checks for k in range(self.checks)]
        return self.p ** group_size + sum(((1 - self.p) * q) ** group_size for q in fail)

    def attempt(self, rng: random.Random) -> tuple[bool, float]:
        if rng.random() < self.p:
            return True, 1.0
        passed = self.usual if rng.random() < self.stuck else rng.randrange(self.checks)
        return False, passed / self.checks


def simulate(
    sampler_kind: str, seed: int, steps: int, inflight: int, learn: float, transfer: float, probe: bool,
    cfg: CurationConfig, fail_slower: float = 1.5, duration_sigma: float = 0.5, manifest_tasks: list[dict] | None = None,
) -> dict:
    """One simulated run; returns its row (see the module docstring). Attempt durations are lognormal(0,
    ``duration_sigma``) time units, an unsolved attempt's × ``fail_slower`` (it runs into its turn budget), so the
    early-stop rule sees the quick outcomes first as it does in a real run."""
    world = random.Random(seed)
    manifest = []
    if manifest_tasks:  # a real probe: its counts seed the sampler, true rates drawn from their posteriors
        candidates = {t["task_id"]: SimTask.binary(world.betavariate(t["passes"] + 0.5, t["attempts"] - t["passes"] + 0.5))
                      for t in manifest_tasks}
        manifest = [(t["task_id"], t["passes"], t["attempts"], t["mean_reward"]) for t in manifest_tasks]
        kept = [t["task_id"] for t in manifest_tasks if t["kept"]]
    else:
        candidates = {f"t{i:02d}": SimTask(world) for i in range(60 if probe else 40)}
        probe_rng = random.Random(seed + 1000)
        for tid, task in candidates.items() if probe else ():
            outs = [task.attempt(probe_rng) for _ in range(4)]
            passes = sum(s for s, _ in outs)
            manifest.append((tid, passes, 4, statistics.fmean(r for _, r in outs)))
        kept = [tid for tid, passes, n, _ in manifest if 0.15 <= passes / n <= 0.85] if probe else sorted(candidates)
    tasks = {tid: candidates[tid] for tid in kept}
    oracle = sampler_kind == "oracle"
    sampler = TaskSampler(kept, cfg.model_copy(update={"sampler": "online" if oracle else sampler_kind}), GROUP_SIZE, seed)
    if oracle:  # knows every task's true rate as it drifts: the floor no estimate can beat
        sampler._zero_signal_estimate = lambda tid, rng: tasks[tid].zero_signal(GROUP_SIZE)
    sampler.seed_probe(m for m in manifest if m[0] in tasks)
    order = sorted(kept)
    pool_p_start = statistics.fmean(t.p for t in tasks.values())

    def uniform(gid: int) -> str:  # the scheduler's seeded shuffled order (runtime.groups.GroupScheduler)
        epoch, pos = divmod(gid, len(order))
        ids = list(order)
        random.Random(seed + epoch).shuffle(ids)
        return ids[pos]

    rng = random.Random(seed + 2000)
    groups: dict[int, dict] = {}  # open group id → task, start time, drawn outcomes and durations, finished
    events: list[tuple[float, int, int]] = []  # (finish time, group id, attempt index)
    rows, gid, trained, now = [], 0, 0, 0.0

    def open_group() -> None:
        nonlocal gid
        tid = sampler.draw(gid, [g["tid"] for g in groups.values()], uniform(gid))
        outs = [tasks[tid].attempt(rng) for _ in range(GROUP_SIZE)]
        durs = [rng.lognormvariate(0, duration_sigma) * (1 if solved else fail_slower) for solved, _ in outs]
        groups[gid] = {"tid": tid, "t0": now, "outs": outs, "durs": durs, "done": [],
                       "predicted": sampler.predicted[gid]}
        for i, d in enumerate(durs):
            heapq.heappush(events, (now + d, gid, i))
        gid += 1

    while sampler.weight_version < steps:
        while len(groups) < inflight:
            open_group()
        now, g, i = heapq.heappop(events)
        group = groups.get(g)
        if group is None:  # cancelled while this attempt ran
            continue
        group["done"].append(group["outs"][i])
        complete = len(group["done"]) == GROUP_SIZE
        if not complete and not sampler.doomed(group["tid"], group["done"]):
            continue
        del groups[g]
        unfinished = GROUP_SIZE - len(group["done"])
        sampler.settle(g, group["tid"], group["done"], unfinished=unfinished)
        compute = sum(min(d, now - group["t0"]) for d in group["durs"])  # attempt-time spent, cancelled ones cut
        zero = group_kind(group["done"]) != "signal"
        false_cancel = unfinished > 0 and group_kind(group["outs"]) == "signal"  # it would have had signal
        rows.append({"version": sampler.weight_version, "zero": zero, "predicted": group["predicted"],
                     "pass": statistics.fmean(s for s, _ in group["done"]), "compute": compute,
                     "cancelled": unfinished > 0, "false_cancel": false_cancel,
                     "saved": sum(max(d - (now - group["t0"]), 0.0) for d in group["durs"])})
        if not zero:  # trained on: the task (and a little every task) gets easier
            tasks[group["tid"]].logit += learn
            for other in tasks.values():
                other.logit += transfer
            trained += 1
            if trained % GROUPS_PER_STEP == 0:
                sampler.weight_version += 1
                sampler.metrics()
    late = [r for r in rows if r["version"] >= 10]
    cancelled = [r for r in rows if r["cancelled"]]
    return {
        "pool": len(kept),
        "zero_all": statistics.fmean(r["zero"] for r in rows),
        "zero_late": statistics.fmean(r["zero"] for r in late),
        "predicted_late": statistics.fmean(r["predicted"] for r in late),
        # the share of rollout compute (attempt-time) that went into groups with no gradient, after step 10
        "waste_late": sum(r["compute"] for r in late if r["zero"]) / sum(r["compute"] for r in late),
        "pass_first": statistics.fmean(r["pass"] for r in rows if r["version"] < 10),
        "pass_last": statistics.fmean(r["pass"] for r in rows if r["version"] >= steps - 10),
        "pool_p_start": pool_p_start,
        "pool_p_end": statistics.fmean(t.p for t in tasks.values()),
        "time": now,  # simulated time to reach ``steps`` steps
        "compute": sum(r["compute"] for r in rows),
        "cancelled": len(cancelled) / len(rows),
        "false_cancel": sum(r["false_cancel"] for r in rows) / len(cancelled) if cancelled else 0.0,
        "signal_lost": sum(r["false_cancel"] for r in rows) / len(rows),
        # attempt-time the cancellations cut, as a share of what the run would have spent without cutting it
        "saved": sum(r["saved"] for r in rows) / (sum(r["compute"] for r in rows) + sum(r["saved"] for r in rows)),
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
        "cancelled": sum(r.get("groups/cancelled", 0.0) for r in rows),
        "cancelled_attempts": sum(r.get("rollout/cancelled_attempts", 0.0) for r in rows),
        "attempts": sum(r.get("rollout/attempts", 0.0) for r in rows),
    }


def task_trends(run_dir: str) -> tuple[int, int, int, float, float]:
    """Per task drawn at least twice, its solve rate over the earlier half of its attempts (by weight version) vs the
    later half, from the run's saved trajectories: (tasks up, same, down, mean earlier, mean later). Learning read
    within each task, since what each sampler draws differs."""
    import json

    by_task: dict[str, list[tuple[int, bool]]] = {}
    for path in Path(run_dir, "trajectories").glob("g*/a*.json"):
        trajectory = json.loads(path.read_text())
        meta = trajectory["metadata"]
        versions = [t["weight_version"] for t in meta.get("turns", [])]
        if versions and "score" in meta:
            by_task.setdefault(trajectory["task_id"], []).append((min(versions), meta["score"]["solved"]))
    moves, early, late = [], [], []
    for attempts in by_task.values():
        if len(attempts) < 8:
            continue
        attempts.sort()
        half = len(attempts) // 2
        a, b = (statistics.fmean(s for _, s in part) for part in (attempts[:half], attempts[half:]))
        moves.append((b > a) - (b < a))
        early.append(a)
        late.append(b)
    mean = statistics.fmean if early else (lambda xs: math.nan)
    return moves.count(1), moves.count(0), moves.count(-1), mean(early), mean(late)


def compare_manifests(paths: list[str]) -> None:
    """Pass rate per probe manifest (``fireflash tasks probe``), on the first one's kept tasks and on all tasks: the
    warm policy's probe first, then re-probes of each run's final checkpoint, so learning is read on the same tasks
    whatever each sampler drew."""
    import json

    manifests = [{t["task_id"]: t for t in json.loads(Path(p).read_text())["tasks"]} for p in paths]
    kept = [tid for tid, t in manifests[0].items() if t["kept"]]
    print(f"{'probe manifest':44} {'pass, kept (' + str(len(kept)) + ')':>16} {'pass, all':>10} {'kept tasks up/same/down':>24}")
    for path, m in zip(paths, manifests):
        def rate(ids: list[str]) -> float:
            ids = [t for t in ids if t in m]
            return sum(m[t]["passes"] for t in ids) / max(sum(m[t]["attempts"] for t in ids), 1)
        moves = [(m[t]["pass_rate"] > manifests[0][t]["pass_rate"]) - (m[t]["pass_rate"] < manifests[0][t]["pass_rate"])
                 for t in kept if t in m]
        print(f"{path:44} {rate(kept):16.2f} {rate(list(m)):10.2f} "
              f"{moves.count(1):>12}/{moves.count(0)}/{moves.count(-1)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 seeds × 40 steps")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps (2 groups each)")
    ap.add_argument("--inflight", type=int, default=5, help="groups sampling when a new one is drawn")
    ap.add_argument("--learn", type=float, default=0.15, help="logit gain of a task per trained group")
    ap.add_argument("--transfer", type=float, default=0.005, help="logit gain of every task per trained group")
    ap.add_argument("--probe", action="store_true", help="probe 60 candidates and keep 15-85 %% (else 40, unfiltered)")
    ap.add_argument("--pool-manifest", metavar="MANIFEST",
                    help="a real probe manifest (fireflash tasks probe) as the pool: its kept tasks, its counts as the "
                    "probe, each task's true rate drawn from Beta(passes + 0.5, failures + 0.5), pass/fail rewards")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a [runtime.curation] field, e.g. --set draw_weight_power=1")
    ap.add_argument("--modes", nargs="+", default=["uniform", "online", "online+stop"],
                    help="samplers to compare; '+stop' turns early_stop on; 'oracle': online drawing by each task's "
                    "true P(zero signal) (simulation only: the floor for this pool)")
    ap.add_argument("--fail-slower", type=float, default=1.5, help="duration factor of an unsolved attempt")
    ap.add_argument("--duration-sigma", type=float, default=0.5, help="lognormal sigma of attempt durations")
    ap.add_argument("--runs", nargs="+", metavar="RUN_DIR", help="summarise real runs instead of simulating")
    ap.add_argument("--manifests", nargs="+", metavar="MANIFEST",
                    help="pass rates of probe manifests on the first one's kept tasks (the probe, then re-probes)")
    args = ap.parse_args()
    if args.manifests:
        compare_manifests(args.manifests)
        return
    if args.runs:
        print(f"{'run':24} {'steps':>5} {'zero all':>9} {'zero >10':>9} {'pred >10':>9} {'pass 1st10':>10} "
              f"{'pass last10':>11} {'retired':>8} {'readmit':>8} {'cancelled':>9} {'cut/attempts':>12}")
        trends = []
        for run in args.runs:
            r = summarize_run(run)
            trends.append((run, task_trends(run)))
            print(f"{run:24} {r['steps']:5d} {r['zero_all']:9.1%} {r['zero_late']:9.1%} {r['predicted_late']:9.1%} "
                  f"{r['pass_first']:10.2f} {r['pass_last']:11.2f} {r['retired']:8.0f} {r['readmitted']:8.0f} "
                  f"{r['cancelled']:9.0f} {r['cancelled_attempts']:5.0f}/{r['attempts']:<6.0f}")
        print("tasks with >= 8 attempts, solve rate over the earlier vs the later half of their attempts:")
        for run, (up, same, down, early, late) in trends:
            print(f"{run:24} up/same/down {up}/{same}/{down}, mean {early:.2f} → {late:.2f}")
        return
    seeds, steps = (3, 40) if args.quick else (args.seeds, args.steps)
    cfg = CurationConfig(**dict(kv.split("=", 1) for kv in args.set))
    manifest_tasks = None
    if args.pool_manifest:
        import json

        manifest_tasks = json.loads(Path(args.pool_manifest).read_text())["tasks"]
    print(f"{seeds} seeds × {steps} steps × {GROUPS_PER_STEP} groups of {GROUP_SIZE}; {args.inflight} in flight; "
          f"learn {args.learn}, transfer {args.transfer}; {args.pool_manifest or ('probe-filtered' if args.probe else 'unfiltered')}; "
          f"unsolved attempts {args.fail_slower}× slower; {cfg.model_dump()}")
    print(f"{'mode':11} {'pool':>4} {'zero all':>8} {'zero≥10':>7} {'pred≥10':>7} {'|err|':>5} {'waste≥10':>8} "
          f"{'true p':>9} {'pass 1st/last10':>15} {'time':>5} {'compute':>7} {'cancel':>6} {'false':>5} "
          f"{'lost sig':>8} {'cut':>5} {'retired':>7} {'readmit':>7}")
    # the pass rate of drawn attempts depends on what is drawn: uniform's is the pool's, online's favours the middle;
    # "true p" is the pool's mean solve rate at the start → end, what training did
    for mode in args.modes:
        kind, _, stop = mode.partition("+")
        mode_cfg = cfg.model_copy(update={"early_stop": bool(stop)})
        runs = [simulate(kind, s, steps, args.inflight, args.learn, args.transfer, args.probe, mode_cfg,
                         args.fail_slower, args.duration_sigma, manifest_tasks) for s in range(seeds)]
        m = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
        err = statistics.fmean(abs(r["predicted_late"] - r["zero_late"]) for r in runs)
        print(f"{mode:11} {m['pool']:4.0f} {m['zero_all']:8.1%} {m['zero_late']:7.1%} {m['predicted_late']:7.1%} "
              f"{err:5.1%} {m['waste_late']:8.1%} {m['pool_p_start']:.2f}→{m['pool_p_end']:.2f} "
              f"{m['pass_first']:7.2f}/{m['pass_last']:.2f} {m['time']:5.0f} {m['compute']:7.0f} {m['cancelled']:6.1%} "
              f"{m['false_cancel']:5.1%} {m['signal_lost']:8.1%} {m['saved']:5.1%} {m['retired']:7.1f} {m['readmitted']:7.1f}")


if __name__ == "__main__":
    main()
