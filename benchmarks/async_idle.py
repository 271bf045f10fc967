"""Trainer and engine idle time, asynchronous vs ``--sync`` loop, with long-tailed attempts (RECIPE.md §1).

    .venv/bin/python benchmarks/async_idle.py            # ~1.5 min on 2 free cores
    .venv/bin/python benchmarks/async_idle.py --quick    # ~1 min

"Idle GPUs cost more than stale rollouts": the asynchronous loop should keep both the trainer and the
engine busy even when a few attempts take ten times the median, where a synchronous loop (generate a
batch, train, generate) waits for the slowest attempt of every batch and leaves the engine idle while
it trains. Both modes run here one after the other on the same workload, through the real
``LocalRuntime`` (workers, group scheduler, advantages, group queue and its bound, weight pushes,
``MeteredEngine``) and the real harness; only the costs are injected:

- an attempt's duration is drawn from a lognormal distribution (seeded by its attempt id, so both modes
  see the same attempts): ``turns`` engine calls that sleep ``engine_share`` of it between them, and
  ``turns - 1`` Bash calls that sleep the rest in an in-memory sandbox;
- a training step costs a fixed ``--step-sec`` (a sleep on the trainer thread); the grader is a seeded
  coin.

Idle shares are the ones the runtime logs in ``metrics.jsonl`` (``trainer/idle_share``,
``engine/idle_share``: 1 - busy time / wall time since training started, taken from the last step),
so the start-up wait for the first batch counts; the trainer's share after the first batch is shown
too. The engine is busy while at least one request is in flight. Sleeps use no CPU, so the numbers
measure scheduling, not the sharing of cores between the two roles (threads_per_role), and weight
pushes are free; the harness's own CPU does run on the event loop, so a machine short of CPU inflates
the async numbers (the table shows the loop's lag and says so).

Both roles can be nearly busy only when rollout capacity roughly matches the trainer's appetite
(``--inflight``, the local analogue of splitting GPUs between them): with more, rollouts run ahead
until ``LocalRuntime`` stops them at its queue bound and the engine idles — or, with a loose bound,
trains on stale turns. The table shows that cost as the version lag of the trained turns and the
share over ``max_staleness`` that the trainer would mask (``--max-queued-groups 2`` keeps it small).

Goal (issue 8): async ≤ 10% idle for each role; sync shown beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.models import build_tiny_tokenizer
from fireflash.protocols import (
    ExecResult,
    GenerateRequest,
    GenerateResult,
    Group,
    Job,
    Score,
    Task,
    TaskEnvironment,
)
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.local import LocalRuntime
from fireflash.tracking import MetricsWriter, read_metrics

GOAL_IDLE_SHARE = 0.10
_REQUEST = re.compile(r"/g(\d+)/a(\d+)#\d+-turn(\d+)")


@dataclass(frozen=True)
class Workload:
    """The injected costs, seconds."""

    median_attempt_sec: float
    sigma: float  # of log(duration): 1.0 puts the 99th percentile at ~10x the median
    turns: int  # engine calls per attempt (the last one ends it); a Bash call between each two
    engine_share: float  # of an attempt's duration spent generating
    step_sec: float
    seed: int

    def attempt_sec(self, group: int, attempt: int) -> float:
        rng = random.Random(f"{self.seed}/{group}/{attempt}")
        return rng.lognormvariate(math.log(self.median_attempt_sec), self.sigma)

    def turn_sec(self, group: int, attempt: int) -> float:
        return self.engine_share * self.attempt_sec(group, attempt) / self.turns

    def tool_sec(self, group: int, attempt: int) -> float:
        return (1 - self.engine_share) * self.attempt_sec(group, attempt) / max(self.turns - 1, 1)


class SleepingEngine:
    """An ``Engine`` whose calls each take their attempt's turn time (a batching server: concurrent requests
    overlap). Turns call Bash ``sleep`` for the tool time, the last one ends the attempt. It computes
    nothing itself, so the event loop's CPU goes to the runtime and the harness, as with a remote engine."""

    def __init__(self, tokenizer: Any, workload: Workload) -> None:
        self.tokenizer, self.workload = tokenizer, workload
        self.weight_version = 0

    def _turn(self, group: int, attempt: int, turn: int) -> str:
        if turn + 1 >= self.workload.turns:
            return "Done."
        command = f"sleep {self.workload.tool_sec(group, attempt):.4f}"
        return f'<tool_call>\n{{"name": "Bash", "arguments": {{"command": "{command}"}}}}\n</tool_call>'

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        group, attempt, _ = (int(x) for x in _REQUEST.search(requests[0].request_id).groups())
        await asyncio.sleep(self.workload.turn_sec(group, attempt))
        results = []
        for request in requests:
            turn = int(_REQUEST.search(request.request_id)[3])
            ids = self.tokenizer.encode(self._turn(group, attempt, turn), add_special_tokens=False)
            ids += request.params.stop_token_ids[:1]
            results.append(GenerateResult(
                request_id=request.request_id, token_ids=ids, logprobs=[-0.5] * len(ids), topk_ids=[[i] for i in ids],
                topk_logprobs=[[-0.5]] * len(ids), finish_reason="stop", weight_version=self.weight_version,
            ))
        return results

    async def update_weights(self, weights: Mapping[str, Any] | Path, version: int) -> None:
        self.weight_version = version

    async def pause(self) -> None:
        return None

    async def resume(self) -> None:
        return None


class SleepSandbox:
    """An in-memory ``Sandbox``: ``sleep X`` takes X seconds, every command succeeds with no output."""

    async def exec(self, command: str, timeout_sec: float | None = None, background: bool = False,
                   on_timeout: str = "kill") -> ExecResult:
        m = re.fullmatch(r"sleep ([0-9.]+)", command.strip())
        seconds = float(m[1]) if m else 0.0
        await asyncio.sleep(seconds)
        return ExecResult(exit_code=0, output_path="/tmp/out", output_size_bytes=0, preview="", duration_sec=seconds)

    async def read_file(self, path: str) -> bytes:
        raise FileNotFoundError(path)

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        return None

    async def fork(self) -> SleepSandbox:
        return SleepSandbox()

    async def jobs(self) -> list[Job]:
        return []

    async def kill_job(self, job_id: str) -> None:
        return None

    async def diff(self) -> list[str]:
        return []

    async def close(self) -> None:
        return None


class SleepBackend:
    """``SandboxBackend`` of ``SleepSandbox`` parents."""

    async def prepare(self, env: TaskEnvironment, name: str) -> SleepSandbox:
        return SleepSandbox()

    async def close(self) -> None:
        return None


class CoinGrader:
    """Solves with probability 1/2, from a seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    async def grade(self, task: Task, sandbox: Any) -> Score:
        solved = self.rng.random() < 0.5
        return Score(reward=float(solved), solved=solved, checks_passed=int(solved), checks_total=1)


class FixedCostTrainer:
    """The ``Trainer`` surface ``LocalRuntime`` uses; a step sleeps ``step_sec`` on the trainer thread.

    It records the version lag of every trained turn (how stale the async loop's data is).
    """

    def __init__(self, step_sec: float, objective: ObjectiveConfig) -> None:
        self.step_sec, self.objective = step_sec, objective
        self.step = self.weight_version = 0
        self.lags: list[int] = []

    def train_step(self, groups: Sequence[Group]) -> dict[str, float]:
        start = time.perf_counter()
        for group in groups:
            for t in group.trajectories:
                self.lags += [self.weight_version - v for s in t.segments for v in s.weight_version if v >= 0]
        time.sleep(self.step_sec)
        self.step += 1
        self.weight_version += 1
        return {"step_sec": time.perf_counter() - start}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def save_checkpoint(self, root: Path, cursor: dict[str, Any]) -> Path:
        return root


def _task() -> Task:
    return Task(id="sleepy", instruction="Wait for the long-running jobs, then say Done.",
                environment=TaskEnvironment(workdir="/app"))


async def measure(
    mode: str, steps: int, workload: Workload, args: argparse.Namespace, tokenizer: Any
) -> dict[str, float]:
    """One run of ``steps`` steps in ``mode``; the runtime's own idle shares from its metrics.jsonl."""
    objective = ObjectiveConfig()
    trainer = FixedCostTrainer(workload.step_sec, objective)
    inflight = args.inflight if mode == "async" else args.group_size * args.groups_per_step
    harness = HarnessConfig(max_turns=workload.turns + 1, context_window_tokens=16384, max_total_tokens=65536,
                            sampling=SamplingConfig(max_new_tokens_per_turn=128, n_top_logprobs=1))
    grader = CoinGrader(workload.seed)
    with tempfile.TemporaryDirectory(prefix=f"async-idle-{mode}-") as run_dir:
        writer = MetricsWriter(Path(run_dir), tensorboard=False)
        runtime = LocalRuntime(
            tasks=[_task()], backend=SleepBackend(), engine=SleepingEngine(tokenizer, workload),
            tokenizer=tokenizer, trainer=trainer, grader_for=lambda t: grader,
            harness=harness, objective=objective, run_dir=Path(run_dir), steps=steps,
            group_size=args.group_size, groups_per_step=args.groups_per_step, max_inflight_attempts=inflight,
            max_attempt_retries=0, discard_zero_signal_groups=True, seed=workload.seed, mode=mode,
            writer=writer, save_trajectories=False, max_queued_groups=args.max_queued_groups,
        )
        loop_lags: list[float] = []
        start, cpu0 = time.perf_counter(), time.process_time()
        probe = asyncio.create_task(_loop_lag(loop_lags))
        try:
            await runtime.run()
        finally:
            probe.cancel()
            writer.close()
        wall = time.perf_counter() - start
        cpu_share = (time.process_time() - cpu0) / wall
        rows = read_metrics(Path(run_dir))
    last = rows[-1]
    # after the first batch: the same logged quantities, without the pipeline's start-up fill
    steady_wall = last["wall_sec"] - rows[0]["wall_sec"]
    steady_busy = sum(r["step_sec"] for r in rows[1:])
    loop_lags.sort()
    lags = trainer.lags
    return {
        "cpu_share": cpu_share,
        "loop_lag_p90_sec": loop_lags[int(0.9 * len(loop_lags))] if loop_lags else 0.0,
        "steps": float(len(rows)),
        "trainer_idle_steady": 1 - steady_busy / steady_wall if steady_wall > 0 else float("nan"),
        "stale_share": sum(lag > objective.max_staleness for lag in lags) / max(len(lags), 1),
        "inflight": float(inflight),
        "wall_sec": wall,
        "trainer_idle": last["trainer/idle_share"],
        "engine_idle": last["engine/idle_share"],
        "first_batch_sec": rows[0]["trainer/wait_sec"],
        "steps_per_min": 60 * len(rows) / last["wall_sec"],
        "attempts_per_min": 60 * runtime.total.attempts / wall,
        "lag_mean": statistics.fmean(lags) if lags else 0.0,
        "lag_max": float(max(lags, default=0)),
    }


async def _loop_lag(out: list[float], period_sec: float = 0.05) -> None:
    """How late the event loop wakes a sleeper (CPU starvation shows here first)."""
    while True:
        start = time.perf_counter()
        await asyncio.sleep(period_sec)
        out.append(time.perf_counter() - start - period_sec)


def _ratio(sync: float, async_: float) -> str:
    return f"{sync / async_:.1f}x" if async_ > 1e-9 else "∞"


def load_tokenizer_for_benchmark(name: str) -> tuple[Any, str]:
    """The main job's tokenizer when its model is cached (realistic prompt lengths), else the tiny one."""
    from fireflash.models import EMBEDDED, cache_root, load_tokenizer

    if name in EMBEDDED and not (cache_root() / "models" / name / "config.json").is_file():
        return build_tiny_tokenizer(), f"tiny test tokenizer ({name} is not cached; prompts ~3x longer)"
    return load_tokenizer(name), name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (~1 min)")
    parser.add_argument("--steps", type=int, default=None, help="async optimizer steps (default 50; --quick 30)")
    parser.add_argument("--sync-steps", type=int, default=None, help="sync optimizer steps (default: --steps / 4)")
    parser.add_argument("--tokenizer", default="smollm2-135m", help="embedded name or HF dir (tiny if not cached)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups-per-step", type=int, default=1)
    parser.add_argument("--inflight", type=int, default=7, help="async attempts in flight (sync: one batch)")
    parser.add_argument("--median-attempt-sec", type=float, default=0.4)
    parser.add_argument("--sigma", type=float, default=1.0, help="lognormal sigma of attempt durations")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--engine-share", type=float, default=0.7)
    parser.add_argument("--step-sec", type=float, default=1.0, help="fixed cost of one training step")
    parser.add_argument("--max-queued-groups", type=int, default=None, help="LocalRuntime's queue bound")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.steps = args.steps or (30 if args.quick else 50)
    # a sync step waits for its batch's slowest attempt: fewer steps give the same shares in similar time
    args.sync_steps = args.sync_steps or max(4, args.steps // 4)
    workload = Workload(
        args.median_attempt_sec, args.sigma, args.turns, args.engine_share, args.step_sec, args.seed
    )
    durations = sorted(workload.attempt_sec(g, a) for g in range(200) for a in range(args.group_size))
    console = Console()
    p90, p99 = durations[int(0.9 * len(durations))], durations[int(0.99 * len(durations))]
    console.print(
        f"attempts: lognormal, median {args.median_attempt_sec} s, p90 {p90:.2f} s, p99 {p99:.2f} s, "
        f"{args.turns} engine calls; training step {args.step_sec} s; "
        f"{args.groups_per_step} group(s) of {args.group_size} per step"
    )
    tokenizer, tokenizer_name = load_tokenizer_for_benchmark(args.tokenizer)
    console.print(f"tokenizer: {tokenizer_name}")
    results = {
        "async": asyncio.run(measure("async", args.steps, workload, args, tokenizer)),
        "sync": asyncio.run(measure("sync", args.sync_steps, workload, args, tokenizer)),
    }
    a, s = results["async"], results["sync"]
    table = Table(title="idle share of each role (runtime's accounting, whole run)")
    for col in ("", "async", "sync", "sync / async"):
        table.add_column(col, justify="right")

    def row(label: str, key: str, fmt: str, ratio: str = "") -> None:
        table.add_row(label, format(a[key], fmt), format(s[key], fmt), ratio)

    for label, key in (("trainer idle", "trainer_idle"), ("engine idle", "engine_idle"),
                       ("trainer idle after the first batch", "trainer_idle_steady")):
        row(label, key, ".1%", _ratio(s[key], a[key]))
    row("steps", "steps", ".0f")
    row("steps / min", "steps_per_min", ".0f", _ratio(a["steps_per_min"], s["steps_per_min"]) + " (async / sync)")
    row("attempts / min", "attempts_per_min", ".0f")
    row("attempts in flight", "inflight", ".0f")
    row("wait for first batch, s", "first_batch_sec", ".1f")
    row("version lag of trained turns, mean", "lag_mean", ".1f")
    row("version lag of trained turns, max", "lag_max", ".0f")
    row(f"trained turns > {ObjectiveConfig().max_staleness} versions old (masked)", "stale_share", ".1%")
    row("event-loop lag p90, s", "loop_lag_p90_sec", ".3f")
    row("CPU used, cores", "cpu_share", ".2f")
    row("wall, s", "wall_sec", ".0f")
    console.print(table)
    ok = a["trainer_idle"] <= GOAL_IDLE_SHARE and a["engine_idle"] <= GOAL_IDLE_SHARE
    console.print(f"goal (async ≤ {GOAL_IDLE_SHARE:.0%} idle for each role): {'met' if ok else 'NOT met'}")
    if a["trainer_idle"] > GOAL_IDLE_SHARE >= a["trainer_idle_steady"]:
        console.print(
            f"the trainer's idle time is the start-up wait for the first batch ({a['first_batch_sec']:.1f} s of "
            f"{a['wall_sec']:.0f} s); more --steps spread it thinner, as a real run's hundreds of steps do"
        )
    if max(a["loop_lag_p90_sec"], s["loop_lag_p90_sec"]) > 0.05:
        console.print(
            "[yellow]the event loop ran late (p90 lag > 50 ms): this process was short of CPU, so hand-offs between "
            "attempts and the trainer were slow and the idle shares above are inflated; rerun on a quieter machine[/]"
        )


if __name__ == "__main__":
    main()
