"""RL training-step time with and without shared prefixes (``TrainerConfig.share_prefix``), side by side.

The step's groups are shaped like the local recipe's rollouts (runs/rl5, 2026-11-30): every attempt opens
with its task's first prompt exactly as the harness renders it (the system prompt with the tool specs, a
bundled train task, the call prefix: ~1,000 tokens), then a sampled tool call, a tool result, and a short
second call (`submit`). The sampled tokens and rollout records are synthetic: time does not depend on
their values. Both settings run ``Trainer.accumulate_gradients`` on the same copy of the embedded
SmolLM2-135M on ``--threads`` threads (the local runtime's trainer has one); the gradients are compared to
show the speed-up costs no exactness.

    .venv/bin/python benchmarks/train_step.py [--groups 2] [--group-size 4] [--threads 1]    # ~4 min idle
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_throughput import task_ids, tool_result_ids  # noqa: E402 (the harness's real first prompt)

from fireflash.models import load_policy, load_tokenizer  # noqa: E402
from fireflash.protocols import Group, Score, Segment, Trajectory  # noqa: E402
from fireflash.rl.config import ObjectiveConfig  # noqa: E402
from fireflash.training.config import TrainerConfig  # noqa: E402
from fireflash.training.trainer import Trainer  # noqa: E402

K = 32


def attempt(tok, task: int, rng: random.Random, first: int, second: int) -> Trajectory:
    """Two turns: ``first`` sampled tokens, a short tool result, ``second`` sampled tokens."""
    prompt = task_ids(tok, task)
    turn1 = [rng.randrange(3, tok.vocab_size) for _ in range(first)]
    result = tool_result_ids(tok, task, 0, 0)
    turn2 = [rng.randrange(3, tok.vocab_size) for _ in range(second)]
    ids = prompt + turn1 + result + turn2
    mask = [0] * len(prompt) + [1] * first + [0] * len(result) + [1] * second
    seg = Segment(
        token_ids=ids, loss_mask=mask, rollout_logprobs=[-2.0 if m else 0.0 for m in mask],
        topk_ids=[[rng.randrange(tok.vocab_size) for _ in range(K)] if m else [] for m in mask],
        topk_logprobs=[[-3.0] * K if m else [] for m in mask], weight_version=[0 if m else -1 for m in mask],
    )
    return Trajectory(task_id=f"task{task}", attempt_id=f"task{task}/{rng.random()}", segments=[seg])


def step_groups(tok, n_groups: int, size: int, seed: int) -> list[Group]:
    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        trajs = [attempt(tok, g, rng, rng.randint(40, 90), rng.randint(12, 24)) for _ in range(size)]
        rewards = [float(i % 2) for i in range(size)]
        groups.append(Group(task_id=f"task{g}", trajectories=trajs, scores=[Score(reward=r, solved=r == 1.0) for r in rewards],
                            advantages=[2 * r - 1 for r in rewards]))
    return groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--micro-batch-tokens", type=int, default=4096, help="configs/local.toml's training.micro_batch_tokens")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok, base = load_tokenizer(), load_policy()
    groups = step_groups(tok, args.groups, args.group_size, seed=0)
    seqs = [len(t.segments[0].token_ids) for g in groups for t in g.trajectories]
    print(f"{len(seqs)} attempts of {min(seqs)}–{max(seqs)} tokens ({sum(seqs)} in all), "
          f"{sum(t.n_sampled_tokens for g in groups for t in g.trajectories)} sampled; {args.threads} thread(s)")
    results = {}
    for share in (False, True):
        trainer = Trainer(copy.deepcopy(base), tok, TrainerConfig(micro_batch_tokens=args.micro_batch_tokens, share_prefix=share),
                          ObjectiveConfig(), temperature=1.0)
        micro = trainer.pack(groups)
        forward = sum(mb.prefix_ids.numel() + mb.input_ids.numel() for mb in micro)
        start = time.perf_counter()
        metrics = trainer.accumulate_gradients(groups)
        sec = time.perf_counter() - start
        grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters()])
        results[share] = (sec, forward, len(micro), metrics["loss"], grads)
        print(f"share_prefix={share!s:5}  {sec:6.1f} s  {forward:6d} tokens through the model in {len(micro)} micro-batch(es)")
    (t0, f0, _, l0, g0), (t1, f1, _, l1, g1) = results[False], results[True]
    rel = float((g1 - g0).norm() / g0.norm())
    print(f"\nspeed-up {t0 / t1:.2f}x  ({f0 / f1:.2f}x fewer tokens); loss {l0:.6g} vs {l1:.6g}; "
          f"gradient relative difference {rel:.1e}")


if __name__ == "__main__":
    main()
