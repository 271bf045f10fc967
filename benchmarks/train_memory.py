"""Resident memory of the local loop over training steps: does RSS stay flat once warm (issue 8)?

    .venv/bin/python benchmarks/train_memory.py             # ~18 min on 2 free cores: both modes, 4 steps each
    .venv/bin/python benchmarks/train_memory.py --quick     # ~13 min: 3 steps each

What ran out of memory: ``fireflash train`` on the 24 GiB machine grew by ~4.5 GB per step (11.6 GB
while sampling, 16.2 after step 1, 20.5 after step 2, killed at 24). The pieces a local step runs are
reproduced here in one process, the way ``runtime.job`` wires them: the embedded SmolLM2-135M loaded
twice (engine and trainer), the ``LocalEngine`` decode thread sampling concurrent requests the whole
time, ``Trainer.train_step`` on a worker thread (``asyncio.to_thread``, as the local runtime's step loop did),
then ``engine.update_weights(trainer.state_dict(), version)``. The batch is synthetic (random tokens,
one third of them sampled, rollout log-probs set near the policy's): memory, not learning, is measured.

Each allocator setting runs in a fresh subprocess; the table shows RSS after every step and the growth
per step after the first (the first step allocates the optimizer state). A flat line is the goal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

MODES = {
    "to_thread (before)": "shared",  # each step on any pool thread, nothing trimmed
    "TrainerThread + trim (now)": "fireflash",  # what LocalRuntime does (runtime.memory)
}


def _batch(vocab: int, n_traj: int, length: int, seed: int) -> list:
    import random

    from fireflash.protocols import Group, Score, Segment, Trajectory

    rng = random.Random(seed)
    trajectories = []
    for i in range(n_traj):
        n_prompt = length * 2 // 3
        ids = [rng.randrange(3, vocab) for _ in range(length)]
        mask = [0] * n_prompt + [1] * (length - n_prompt)
        trajectories.append(Trajectory(task_id="mem", attempt_id=f"mem/{i}", segments=[Segment(
            token_ids=ids, loss_mask=mask,
            rollout_logprobs=[-8.0 if m else 0.0 for m in mask],
            topk_ids=[[rng.randrange(vocab) for _ in range(8)] if m else [] for m in mask],
            topk_logprobs=[[-8.0] * 8 if m else [] for m in mask],
            weight_version=[seed if m else -1 for m in mask],  # step k's batch: version k, fresh
        )]))
    rewards = [1.0 if i % 2 else 0.0 for i in range(n_traj)]
    return [Group(task_id="mem", trajectories=trajectories, scores=[Score(reward=r, solved=r == 1.0) for r in rewards],
                  advantages=[r - 0.5 for r in rewards])]


async def _sample_forever(engine, vocab: int, concurrent: int, prompt_len: int, stop: asyncio.Event) -> int:
    import random

    from fireflash.protocols import GenerateRequest, SamplingParams

    rng, n = random.Random(1), 0

    async def one(slot: int) -> None:
        nonlocal n
        while not stop.is_set():
            prompt = [rng.randrange(3, vocab) for _ in range(prompt_len + rng.randrange(256))]
            await engine.generate([GenerateRequest(request_id=f"r{slot}-{n}", prompt_ids=prompt,
                                                   params=SamplingParams(max_new_tokens=48, n_top_logprobs=32))])
            n += 1

    await asyncio.gather(*(one(s) for s in range(concurrent)))
    return n


async def _pool_traffic(stop: asyncio.Event, concurrent: int = 8) -> None:
    """Short calls on the default thread pool, as sandbox commands make during rollouts."""

    async def one() -> None:
        while not stop.is_set():
            await asyncio.to_thread(time.sleep, 0.02)

    await asyncio.gather(*(one() for _ in range(concurrent)))


async def _child(args: argparse.Namespace) -> dict:
    import torch

    from fireflash.engines.local import LocalEngine
    from fireflash.models import load_policy
    from fireflash.rl.config import ObjectiveConfig
    from fireflash.runtime.memory import TrainerThread, peak_rss_gb, rss_gb
    from fireflash.training.config import TrainerConfig
    from fireflash.training.trainer import Trainer

    torch.set_num_threads(1)
    trainer = Trainer(load_policy(), None, TrainerConfig(lr=1e-5, micro_batch_tokens=args.length), ObjectiveConfig(),
                      temperature=1.0)
    engine = LocalEngine(load_policy(), max_batch_size=args.concurrent)
    vocab = trainer.model.config.vocab_size
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_forever(engine, vocab, args.concurrent, args.prompt_len, stop))
    traffic = asyncio.create_task(_pool_traffic(stop))
    thread = TrainerThread()

    async def on_trainer(fn, *a, trim=False):
        if args.mode == "fireflash":
            return await thread.run(fn, *a, trim=trim)
        return await asyncio.to_thread(fn, *a)

    await asyncio.sleep(args.warm_sec)
    rows = [{"step": 0, "rss_gb": rss_gb()}]
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        await on_trainer(trainer.train_step, _batch(vocab, args.trajectories, args.length, trainer.weight_version), trim=True)
        await engine.update_weights(await on_trainer(trainer.state_dict), trainer.weight_version)
        rows.append({"step": step, "rss_gb": rss_gb(), "sec": time.perf_counter() - t0})
    stop.set()
    requests = await sampler
    await traffic
    await engine.close()
    thread.close()
    return {"rows": rows, "peak_gb": peak_rss_gb(), "requests": requests}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 steps per mode")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--trajectories", type=int, default=2, help="attempts per step (one group)")
    p.add_argument("--length", type=int, default=2048, help="tokens per attempt (also the micro-batch budget)")
    p.add_argument("--concurrent", type=int, default=8, help="requests the engine samples at all times")
    p.add_argument("--prompt-len", type=int, default=1024)
    p.add_argument("--warm-sec", type=float, default=20.0, help="sampling before the first step")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=sorted(set(MODES.values())), default="fireflash", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_child(args))))
        return
    from rich.console import Console
    from rich.table import Table

    steps = 3 if args.quick else args.steps
    base = [sys.executable, __file__, "--child", "--steps", str(steps), "--trajectories", str(args.trajectories),
            "--length", str(args.length), "--concurrent", str(args.concurrent), "--prompt-len", str(args.prompt_len),
            "--warm-sec", str(args.warm_sec)]
    table = Table(title=f"RSS (GB) after each step: {args.trajectories}x{args.length} tokens/step, "
                        f"{args.concurrent} requests sampling throughout")
    table.add_column("trainer calls")
    for s in range(steps + 1):
        table.add_column("warm" if s == 0 else f"step {s}", justify="right")
    table.add_column("GB/step after 1", justify="right")
    table.add_column("peak", justify="right")
    for name, mode in MODES.items():
        clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        out = subprocess.run([*base, "--mode", mode], env=clean, capture_output=True, text=True, check=False)
        if out.returncode:
            table.add_row(name, *["-"] * (steps + 1), "failed", out.stderr.strip().splitlines()[-1][:40])
            continue
        res = json.loads(out.stdout.strip().splitlines()[-1])
        rss = [r["rss_gb"] for r in res["rows"]]
        growth = (rss[-1] - rss[1]) / max(1, len(rss) - 2)
        table.add_row(name, *[f"{x:.2f}" for x in rss], f"{growth:+.2f}", f"{res['peak_gb']:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
