"""Benchmark of the RL objective (issue 7), printing two ratios measured side by side in one run.

1. Step time, forward + backward of SmolLM2-135M over n_seqs x seq_tokens tokens (one micro-batch per
   sequence, as the trainer runs it) with the full objective (TIS + top-32 score centering) vs plain
   GRPO (TIS and SC off). Both use the chunked log-prob path, so the ratio is the price of TIS + SC.
   The LM-head part alone (hidden states → loss → backward) is also timed over several repetitions,
   since on a shared CPU its difference is steadier than that of two ~70 s model steps.
2. Peak memory of the loss path from hidden states [T, H] and the LM head [V, H] to the gradients:
   chunked (``objective_loss``) vs a naive full-vocabulary log-softmax of the same objective. Measured as
   the process's peak RSS (VmHWM, reset through /proc/self/clear_refs) above the RSS before the call,
   before the model is loaded.

The rollout record (log q, top-k) is synthetic: timings and memory do not depend on its values.
Run (~5 min on an idle 2-core machine, 20+ min when other processes share the CPU):

    .venv/bin/python benchmarks/objective.py [--seq-tokens 2048] [--n-seqs 2] [--full-reps 1] [--head-reps 3]
                                             [--threads 1]
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable

import torch

from fireflash.models import load_policy
from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.loss import PolicyBatch, policy_loss
from fireflash.rl.objective import objective_loss

TEMPERATURE, TRAINER_VERSION, TOPK = 1.0, 3, 32
FULL = ObjectiveConfig()
PLAIN = ObjectiveConfig(tis=False, score_centering=False)


def _status_kb(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", open("/proc/self/status").read()).group(1))


def peak_rss_above_start_mb(fn: Callable[[], None]) -> float:
    """MiB of peak resident memory ``fn`` adds above the resident memory at its start (Linux only)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    start = _status_kb("VmRSS")
    fn()
    return (_status_kb("VmHWM") - start) / 1024


def synthetic_batch(targets: torch.Tensor, n_seqs: int, vocab: int, seed: int = 0) -> PolicyBatch:
    """A rollout record for T = len(targets) sampled tokens split evenly over ``n_seqs`` attempts."""
    g = torch.Generator().manual_seed(seed)
    t = targets.numel()
    topk_logprobs = (
        torch.log_softmax(torch.randn(t, TOPK, generator=g) * 2, -1).sort(-1, descending=True).values
    )
    return PolicyBatch(
        target_ids=targets,
        rollout_logprobs=-3 * torch.rand(t, generator=g),
        topk_ids=torch.randint(0, vocab, (t, TOPK), generator=g),
        topk_logprobs=topk_logprobs,
        weight_version=torch.randint(TRAINER_VERSION - 2, TRAINER_VERSION + 1, (t,), generator=g),
        attempt_index=torch.arange(n_seqs).repeat_interleave(t // n_seqs),
        advantages=torch.linspace(-1, 1, n_seqs),
        n_sampled_tokens=torch.full((n_seqs,), t // n_seqs),
    )


def naive_loss(
    hidden: torch.Tensor, weight: torch.Tensor, batch: PolicyBatch, cfg: ObjectiveConfig
) -> torch.Tensor:
    """The same objective from one whole [T, V] log-softmax (``policy_loss`` without the chunked pass)."""
    logp = torch.log_softmax(hidden @ weight.T / TEMPERATURE, -1)
    lp = logp.gather(1, batch.target_ids[:, None]).squeeze(1)
    topk = logp.gather(1, batch.topk_ids[:, : cfg.score_centering_topk]) if cfg.score_centering else None
    return policy_loss(lp, topk, batch, TRAINER_VERSION, cfg)[0]


def head_step(
    hidden: torch.Tensor, weight: torch.Tensor, batch: PolicyBatch, cfg: ObjectiveConfig | None
) -> float:
    """Loss + backward from leaf hidden states (cfg None: the naive path); returns the loss."""
    hidden.grad = weight.grad = None
    if cfg is None:
        loss = naive_loss(hidden, weight, batch, FULL)
    else:
        loss, _ = objective_loss(hidden, weight, batch, TRAINER_VERSION, TEMPERATURE, cfg)
    loss.backward()
    return loss.item()


def interleaved(arms: dict[str, Callable[[], object]], reps: int) -> dict[str, tuple[float, float]]:
    """Per arm, (wall, CPU) seconds of the call with the median CPU time among ``reps`` calls.

    Arms alternate within each repetition so drifting load hits them alike. CPU time (all threads of
    this process) is what the ratios use: unlike wall time it does not count the time other processes
    on a shared CPU hold the cores.
    """
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    for _ in range(reps):
        for name, fn in arms.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {name: sorted(t, key=lambda x: x[1])[reps // 2] for name, t in times.items()}


def full_step(model, seqs: list[torch.Tensor], batch: PolicyBatch, cfg: ObjectiveConfig) -> None:
    """Forward + backward of every sequence as its own micro-batch (gradients accumulate)."""
    model.zero_grad(set_to_none=True)
    per_seq = seqs[0].numel() - 1
    for i, ids in enumerate(seqs):
        hidden = model.model(ids[None]).last_hidden_state[0, :-1]
        sl = slice(i * per_seq, (i + 1) * per_seq)
        micro = PolicyBatch(*(f[sl] for f in batch[:6]), batch.advantages, batch.n_sampled_tokens)
        loss, _ = objective_loss(hidden, model.lm_head.weight, micro, TRAINER_VERSION, TEMPERATURE, cfg)
        loss.backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-tokens", type=int, default=2048)
    parser.add_argument("--n-seqs", type=int, default=2)
    parser.add_argument(
        "--full-reps", type=int, default=1, help="model steps per arm (~35 s per 2,048 tokens each)"
    )
    parser.add_argument("--head-reps", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads; 1 by default because on an oversubscribed CPU OpenMP threads spin-wait for "
        "each other and inflate both wall and CPU time several-fold (measured: 2 x 64-token step 22-30 CPU s "
        "with 2 threads vs 4 with 1 under load 10); ratios barely depend on the thread count",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    vocab, width = 49152, 576  # SmolLM2-135M
    t = args.n_seqs * (args.seq_tokens - 1)
    seqs = [torch.randint(0, vocab, (args.seq_tokens,)) for _ in range(args.n_seqs)]
    batch = synthetic_batch(torch.cat([s[1:] for s in seqs]), args.n_seqs, vocab)
    print(
        f"T = {t} sampled tokens ({args.n_seqs} x {args.seq_tokens}), V = {vocab}, H = {width}, K = {TOPK}, "
        f"chunk = {FULL.logprob_chunk_tokens}, threads = {torch.get_num_threads()}"
    )

    hidden = torch.randn(t, width, requires_grad=True)
    weight = (torch.randn(vocab, width) * 0.05).requires_grad_()
    mem_chunked = peak_rss_above_start_mb(lambda: head_step(hidden, weight, batch, FULL))
    mem_naive = peak_rss_above_start_mb(lambda: head_step(hidden, weight, batch, None))
    print(
        f"peak memory of the loss path (fwd+bwd, incl. the {vocab * width * 4 / 2**20:.0f} MiB weight gradient): "
        f"chunked {mem_chunked:.0f} MiB, naive {mem_naive:.0f} MiB"
    )
    loss_c, loss_n = head_step(hidden, weight, batch, FULL), head_step(hidden, weight, batch, None)
    print(f"loss chunked {loss_c:.6f} vs naive {loss_n:.6f}")

    model = load_policy("smollm2-135m")
    weight = model.lm_head.weight
    with torch.no_grad():
        states = torch.cat([model.model(s[None]).last_hidden_state[0, :-1] for s in seqs])
    states.requires_grad_()
    head = interleaved(
        {
            "plain": lambda: head_step(states, weight, batch, PLAIN),
            "tis+sc": lambda: head_step(states, weight, batch, FULL),
            "naive tis+sc": lambda: head_step(states, weight, batch, None),
        },
        args.head_reps,
    )
    print(
        f"LM head + loss fwd+bwd (median of {args.head_reps}), wall / CPU s: "
        + ", ".join(f"{k} {w:.2f} / {c:.2f}" for k, (w, c) in head.items())
    )
    warm = [s[:256] for s in seqs]  # first-backward allocations must not land on the first timed arm
    full_step(model, warm, synthetic_batch(torch.cat([s[1:] for s in warm]), args.n_seqs, vocab), FULL)
    step = interleaved(
        {
            "plain": lambda: full_step(model, seqs, batch, PLAIN),
            "tis+sc": lambda: full_step(model, seqs, batch, FULL),
        },
        args.full_reps,
    )
    print(
        "model step fwd+bwd, wall / CPU s: "
        + ", ".join(f"{k} {w:.1f} / {c:.1f}" for k, (w, c) in step.items())
    )

    plain_cpu, full_cpu = step["plain"][1], step["tis+sc"][1]
    derived = (plain_cpu + head["tis+sc"][1] - head["plain"][1]) / plain_cpu
    print(
        f"RATIO step time TIS+SC / plain GRPO (CPU time): {full_cpu / plain_cpu:.3f} measured, {derived:.3f} from "
        f"the head difference over the plain step (goal <= 1.05; reference 1.076)"
    )
    print(f"RATIO peak memory naive / chunked: {mem_naive / mem_chunked:.1f}x (goal >= 4x)")


if __name__ == "__main__":
    main()
