"""Harness overhead per tool call, and tokens per trial vs a naive harness (RECIPE.md §4).

    .venv/bin/python benchmarks/harness_overhead.py [--backend bwrap|unsafe-local] [--calls 200] [--tiny]

1. Overhead: a scripted attempt of ``--calls`` Bash calls (``true``) runs through the real harness and
   sandbox. Engine and sandbox calls are timed by thin proxies; the harness's own time per tool call is the
   gap between an engine call returning and the next one starting, minus the sandbox time inside that gap
   (parsing, dispatch, result formatting, rendering, tokenization, prefix guard). Goal: p50 <= 1 ms.
2. Tokens per trial: the same replayed agent trajectories (commands with small and large outputs) run
   through (a) this harness — output to files with head+tail previews, compaction at 85% of the window —
   and (b) a naive harness — full output inline, no compaction (huge window). Tokens per trial are the
   input tokens sent to the engine over all turns plus the sampled tokens. Goal: ratio <= 0.6.

Both measurements run side by side in one process; CPU contention on a shared machine makes absolute
timings noisy, so the ratio and the p50 are what to read.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
from typing import Any

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness import HarnessConfig, run_attempt
from fireflash.harness.compaction import SUMMARY_REQUEST
from fireflash.protocols import Task, TaskEnvironment, TaskLimits
from fireflash.sandbox import make_backend
from fireflash.sandbox.config import SandboxConfig


class Timed:
    """Forwards every coroutine method of ``inner`` and records (start, end, cpu start, cpu end) of each call.

    cpu is this thread's CPU time (``time.thread_time``): unlike wall time it does not grow when other
    processes compete for the cores.
    """

    def __init__(self, inner: Any, spans: list[tuple[float, float]]) -> None:
        self._inner, self._spans = inner, spans

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def timed(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return await attr(*args, **kwargs)
            finally:
                self._spans.append((start, time.perf_counter(), cpu, time.thread_time()))

        return timed


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


WORKLOAD = [
    "ls -la /usr/lib/python3*/ | head -50",
    "ls -R /usr/lib/python3*/json /usr/lib/python3*/email",
    "python3 -c \"import this\"",
    "cat /usr/lib/python3*/textwrap.py",
    "grep -rn 'def ' /usr/lib/python3*/json/",
    "python3 -c \"[print(f'test_case_{i} PASSED') for i in range(800)]\"",
    "echo ok",
    "cat /usr/lib/python3*/shlex.py",
    "python3 -c \"import sys; print(sys.version)\"",
    "ls -R /usr/lib/python3*/xml",
    "wc -l /usr/lib/python3*/*.py | tail -5",
    "python3 -c \"[print('x' * 120) for _ in range(400)]\"",
]


def replay_script(tok: Any, commands: list[str]) -> Any:
    """A script function: the next command, a summary whenever the harness asks for one, then an answer."""
    state = {"i": 0}

    def next_turn(request: Any) -> str:
        if SUMMARY_REQUEST[-40:] in tok.decode(request.prompt_ids[-300:]):
            return "## Progress\nRan the inspection commands; outputs are in /tmp/.fireflash.\n## Next steps\nContinue."
        if state["i"] >= len(commands):
            return "Done."
        state["i"] += 1
        return f"Running step {state['i']}.\n" + call("Bash", command=commands[state["i"] - 1])

    return next_turn


async def attempt(tok: Any, backend_name: str, cfg: HarnessConfig, script: Any, preview_chars: int,
                  engine_spans: list, sandbox_spans: list) -> Any:
    backend = make_backend(SandboxConfig(backend=backend_name, preview_chars=preview_chars))
    task = Task(id="bench", instruction="Inspect the Python standard library and report.",
                environment=TaskEnvironment(workdir="/app"), limits=TaskLimits(agent_timeout_sec=3600))
    try:
        parent = await backend.prepare(task.environment, "bench")
        sandbox = await parent.fork()
        engine = ScriptedEngine(tok, script)
        traj = await run_attempt(task, Timed(sandbox, sandbox_spans), Timed(engine, engine_spans), tok, cfg, "bench-0")
        await sandbox.close()
        return traj
    finally:
        await backend.close()


def overhead_ms(engine_spans: list, sandbox_spans: list) -> tuple[list[float], list[float]]:
    """Per tool call: (wall ms, CPU ms) between an engine call's end and the next one's start, sandbox excluded."""
    wall, cpu = [], []
    for (_, done, _, cpu_done), (nxt, _, cpu_next, _) in itertools.pairwise(engine_spans):
        inside = [s for s in sandbox_spans if s[0] >= done and s[1] <= nxt]
        wall.append((nxt - done - sum(s[1] - s[0] for s in inside)) * 1000)
        cpu.append((cpu_next - cpu_done - sum(s[3] - s[2] for s in inside)) * 1000)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="bwrap", choices=["bwrap", "unsafe-local"])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--tiny", action="store_true", help="use the tiny test tokenizer instead of SmolLM2's")
    args = ap.parse_args()
    if args.tiny:
        from fireflash.models import build_tiny_tokenizer

        tok = build_tiny_tokenizer()
    else:
        from fireflash.models import load_tokenizer

        tok = load_tokenizer("smollm2-135m")

    es, ss = [], []
    cfg = HarnessConfig(max_turns=args.calls + 1, max_total_tokens=10**9, context_window_tokens=10**6)
    traj = asyncio.run(attempt(tok, args.backend, cfg, [call("Bash", command="true")] * args.calls + ["Done."],
                               4000, es, ss))
    wall, cpu = overhead_ms(es, ss)
    sandbox_ms = statistics.median(s[1] - s[0] for s in ss) * 1000
    print(f"[overhead] {traj.n_turns} turns ({len(traj.segments[0].token_ids):,} tokens at the end), status "
          f"{traj.status.value}; sandbox exec p50 {sandbox_ms:.2f} ms")
    for name, ms in (("wall", wall), ("cpu", cpu)):
        print(f"[overhead] harness {name:4s} per tool call: p50 {statistics.median(ms):.3f} ms, "
              f"p90 {statistics.quantiles(ms, n=10)[-1]:.3f} ms · goal p50 <= 1 ms")

    results = {}
    for name, cfg, preview in (
        ("fireflash", HarnessConfig(max_turns=100), 4000),
        ("naive", HarnessConfig(max_turns=100, preview_chars=10**8, compact_at=1.0, context_window_tokens=10**7,
                                max_total_tokens=10**9, read_max_chars=10**8), 10**8),
    ):
        traj = asyncio.run(attempt(tok, args.backend, cfg, replay_script(tok, WORKLOAD), preview, [], []))
        c = traj.token_counts
        results[name] = c.n_input_tokens + c.n_output_tokens
        print(f"[tokens] {name:9s} status {traj.status.value} ({traj.finish_reason}), {traj.n_turns} turns, "
              f"{len(traj.segments)} segment(s): {c.n_input_tokens:,} input + {c.n_output_tokens:,} output = "
              f"{results[name]:,} tokens per trial")
    print(f"[tokens] ratio fireflash / naive = {results['fireflash'] / results['naive']:.3f} · goal <= 0.6")


if __name__ == "__main__":
    main()
