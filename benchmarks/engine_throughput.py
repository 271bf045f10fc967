"""Local engine throughput: continuous batching at several concurrencies, and prompt-lookup speculation.

Part 1 — aggregate decode throughput. ``c`` simulated agents (c = 1, 4, 16, 32) arrive ``--stagger-sec``
apart; each runs ``--turns`` turns of sampled tokens at the training temperature, appending a tool result
between turns (the next prompt extends the previous turn's tokens, as the harness does). Reported: sampled
tokens / wall seconds from first arrival to last finish (prefill included, because rollouts pay for it),
and the ratio to c = 1 (the mean of a c = 1 run first and another last), all measured in this one run, for two
workload shapes:

- ``rollout``: the shape of real rollouts, measured on the 165 saved eval trajectories of the SFT'd
  SmolLM2 (runs/eval-*, 2026-11-30): a ~1,050-token first prompt (the system prompt, shared, plus a task),
  a median of 2-3 turns, 67 sampled tokens per turn on average, 79 tokens of tool result between turns.
  Here: agent i starts on bundled train task i exactly as the harness renders it, then 3 turns of
  ``--tokens`` (64) with tool results of ~70 tokens of real text.
- ``read-heavy``: every agent first reads a ~400-token source file, then 3 turns of 32 tokens with short
  tool results: ~4.5 prompt tokens to prefill per sampled token, the prefill-bound extreme.

Part 2 — prompt-lookup speculative decoding on agent transcripts at concurrency 1, per temperature:
tokens/s with drafts of ``--spec-tokens`` versus without, and the draft acceptance rate. The transcripts
are agent-format conversations (system prompt, task, a Read of a real source file, the assistant turn
started with an Edit call prefix, as the harness does) built from this repository's files: no trained
agent's transcripts exist yet, so say so when quoting the numbers.

Run (needs a quiet machine; timings under CPU contention are meaningless):

    .venv/bin/python benchmarks/engine_throughput.py                # SmolLM2-135M, minutes on a quiet 2-core machine
    .venv/bin/python benchmarks/engine_throughput.py --quick        # smaller workload
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import torch

from fireflash.engines.local import LocalEngine
from fireflash.harness.prompt import opening_messages
from fireflash.harness.rendering import ChatRenderer
from fireflash.models import load_policy, load_tokenizer
from fireflash.protocols import GenerateRequest, SamplingParams
from fireflash.tasks import bundled_tasks

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = (ROOT / "src/fireflash/harness/system_prompt.md").read_text().replace("$workdir", "/app")
SOURCES = [
    "src/fireflash/engines/lookup.py",
    "src/fireflash/engines/weights.py",
    "src/fireflash/engines/sampling.py",
]
TASKS = [
    "Rename the function in {path} to a clearer name and keep its docstring accurate.",
    "Add input validation to the main function in {path}; raise ValueError with a clear message.",
    "Fix the docstring of the first function in {path} so it states the units of every argument.",
]
TRAIN_TASKS = bundled_tasks("train")
CALL_PREFIX = '<tool_call>\n{{"name": "Edit", "arguments": {{"file_path": "/app/{name}", "old_string": "'


def transcript_ids(tok, i: int, source_chars: int) -> list[int]:
    """An agent-format prompt: system, task, a Read call and its numbered output, then an Edit call prefix."""
    path = SOURCES[i % len(SOURCES)]
    name = Path(path).name
    text = (ROOT / path).read_text()[:source_chars]
    numbered = "\n".join(f"{n + 1:>6}\t{line}" for n, line in enumerate(text.splitlines()))
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASKS[i % len(TASKS)].format(path=f"/app/{name}") + f" (attempt {i})"},
        {
            "role": "assistant",
            "content": f'<tool_call>\n{{"name": "Read", "arguments": {{"file_path": "/app/{name}"}}}}\n</tool_call>',
        },
        {"role": "tool", "content": numbered},
    ]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tok.encode(prompt + CALL_PREFIX.format(name=name), add_special_tokens=False)


def task_ids(tok, i: int) -> list[int]:
    """A rollout's first prompt exactly as the harness renders it (system prompt with the tool specs, a
    bundled train task's instruction, the call prefix of configs/local.toml): agent i gets task i."""
    renderer = ChatRenderer(tok)
    task = TRAIN_TASKS[i % len(TRAIN_TASKS)]
    messages = opening_messages(task.instruction, task.environment.workdir, few_shot=False)
    return renderer.encode(renderer.render_text(messages, add_generation_prompt=True) + '<tool_call>\n{"name": "')


def tool_result_ids(tok, i: int, turn: int, chars: int) -> list[int]:
    """The end of the assistant turn, a tool result of real text (``chars`` of a source file), a new turn."""
    text = (ROOT / SOURCES[(i + turn) % len(SOURCES)]).read_text()
    start = (97 * i + 31 * turn) % max(1, len(text) - chars)
    body = text[start : start + chars] if chars else "[Edit] applied; 1 occurrence replaced."
    return tok.encode(
        f"<|im_end|>\n<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )


WORKLOADS = {  # name → (first prompt, sampled tokens per turn, tool-result characters)
    "rollout": (lambda tok, i, a: task_ids(tok, i), lambda a: a.tokens, lambda a: a.tool_chars),
    "read-heavy": (lambda tok, i, a: transcript_ids(tok, i, a.source_chars), lambda a: 32, lambda a: 0),
}


async def run_agents(engine: LocalEngine, tok, n_agents: int, workload: str, args: argparse.Namespace) -> dict:
    first_prompt, tokens, tool_chars = WORKLOADS[workload]

    async def agent(i: int) -> int:
        await asyncio.sleep(i * args.stagger_sec)
        ids, n = first_prompt(tok, i, args), 0
        for turn in range(args.turns):
            params = SamplingParams(temperature=1.0, max_new_tokens=tokens(args), n_top_logprobs=32)
            (res,) = await engine.generate(
                [GenerateRequest(request_id=f"a{i}t{turn}", prompt_ids=ids, params=params)]
            )
            n += len(res.token_ids)
            ids = ids + res.token_ids + tool_result_ids(tok, i, turn, tool_chars(args))
        return n

    before = dict(engine.stats)
    start = time.perf_counter()
    sampled = sum(await asyncio.gather(*(agent(i) for i in range(n_agents))))
    wall = time.perf_counter() - start
    delta = {k: engine.stats[k] - before[k] for k in engine.stats}
    return {
        "agents": n_agents,
        "sampled_tokens": sampled,
        "wall_sec": wall,
        "tokens_per_sec": sampled / wall,
        **delta,
    }


async def run_spec(
    engine: LocalEngine, tok, temperature: float, tokens: int, n_transcripts: int, source_chars: int
) -> dict:
    before = dict(engine.stats)
    start, sampled = time.perf_counter(), 0
    for i in range(n_transcripts):
        params = SamplingParams(temperature=temperature, max_new_tokens=tokens, n_top_logprobs=32)
        (res,) = await engine.generate(
            [
                GenerateRequest(
                    request_id=f"spec{i}", prompt_ids=transcript_ids(tok, i, source_chars), params=params
                )
            ]
        )
        sampled += len(res.token_ids)
    wall = time.perf_counter() - start
    delta = {k: engine.stats[k] - before[k] for k in engine.stats}
    return {"sampled_tokens": sampled, "wall_sec": wall, "tokens_per_sec": sampled / wall, **delta}


async def main(args: argparse.Namespace) -> dict:
    torch.manual_seed(0)
    tok = load_tokenizer(args.model)
    model = load_policy(args.model)
    report: dict = {
        "model": args.model,
        "threads": args.threads,
        "load_avg_start": os.getloadavg(),
        "throughput": [],
        "speculative": [],
    }

    async def engine_for(batch: int, spec_tokens: int) -> LocalEngine:
        engine = LocalEngine(
            model,
            max_batch_size=batch,
            prompt_lookup_tokens=spec_tokens,
            num_threads=args.threads,
            prefix_cache_tokens=args.prefix_cache_tokens,
            prefill_chunk_tokens=args.prefill_chunk_tokens,
            shared_prefix_min_tokens=args.shared_prefix_min_tokens,
        )
        warm = GenerateRequest(
            request_id="warmup", prompt_ids=tok.encode("Hello"), params=SamplingParams(max_new_tokens=4)
        )
        await engine.generate([warm])
        return engine

    print(
        f"# engine throughput — {args.model}, {args.threads} threads, load avg at start {report['load_avg_start']}"
    )
    for workload in args.workloads:
        print(
            f"## continuous batching, {workload} workload: agents x {args.turns} turns, arrivals {args.stagger_sec} s "
            f"apart, T=1.0, prefill chunks of {args.prefill_chunk_tokens}"
        )
        # c = 1 runs first and again last: the ratio's denominator is their mean, so a burst of CPU steal
        # during one short c = 1 run does not make the ratios
        runs = []
        for c in [*args.concurrency, 1] if 1 in args.concurrency else args.concurrency:
            engine = await engine_for(c, 0)
            runs.append(await run_agents(engine, tok, c, workload, args))
            await engine.close()
            print(f"  c={c}: {runs[-1]['tokens_per_sec']:.1f} tok/s", flush=True)
        singles = [r["tokens_per_sec"] for r in runs if r["agents"] == 1]
        base = sum(singles) / len(singles) if singles else runs[0]["tokens_per_sec"]
        print(
            f"{'agents':>6} {'tokens':>7} {'wall s':>8} {'tok/s':>8} {'x c=1':>6} {'prefill':>8} {'cached':>8} {'steps':>6}"
            f" {'shared rows/step':>16}"
        )
        for row in runs:
            row |= {"workload": workload, "ratio_to_c1": row["tokens_per_sec"] / base}
            report["throughput"].append(row)
            print(
                f"{row['agents']:>6} {row['sampled_tokens']:>7} {row['wall_sec']:>8.1f} {row['tokens_per_sec']:>8.1f} "
                f"{row['ratio_to_c1']:>6.2f} {row['prefill_tokens']:>8} {row['cached_tokens']:>8} {row['decode_steps']:>6}"
                f" {row['shared_prefix_row_steps'] / max(1, row['decode_steps']):>16.1f}"
            )
        if len(singles) > 1:
            print(f"x c=1: ratio to the mean of the two c=1 runs ({singles[0]:.1f}, {singles[1]:.1f} tok/s)")
        print()

    print(
        f"## prompt-lookup speculation, concurrency 1, {args.spec_transcripts} transcripts x {args.spec_max_tokens} tokens, drafts of {args.spec_tokens}"
    )
    print(f"{'T':>4} {'plain tok/s':>12} {'spec tok/s':>11} {'speedup':>8} {'accepted':>9}")
    for temperature in args.temperatures:
        rows = {}
        for k in (0, args.spec_tokens):
            engine = await engine_for(1, k)
            rows[k] = await run_spec(
                engine, tok, temperature, args.spec_max_tokens, args.spec_transcripts, args.source_chars
            )
            await engine.close()
        spec = rows[args.spec_tokens]
        speedup = spec["tokens_per_sec"] / rows[0]["tokens_per_sec"]
        acceptance = spec["accepted_draft_tokens"] / max(1, spec["draft_tokens"])
        report["speculative"].append(
            {
                "temperature": temperature,
                "plain": rows[0],
                "spec": spec,
                "speedup": speedup,
                "acceptance": acceptance,
            }
        )
        print(
            f"{temperature:>4} {rows[0]['tokens_per_sec']:>12.1f} {spec['tokens_per_sec']:>11.1f} {speedup:>8.2f} {acceptance:>9.0%}"
        )
    report["load_avg_end"] = os.getloadavg()
    print(
        f"\nload avg at end {report['load_avg_end']} (other processes on the machine distort these numbers)"
    )
    return report


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=["rollout", "read-heavy"])
    p.add_argument("--tokens", type=int, default=64, help="rollout workload: sampled tokens per turn")
    p.add_argument("--tool-chars", type=int, default=240, help="rollout workload: characters of each tool result")
    p.add_argument("--prefill-chunk-tokens", type=int, default=256)
    p.add_argument("--stagger-sec", type=float, default=0.25)
    p.add_argument(
        "--source-chars", type=int, default=800, help="read-heavy workload: characters of the file read first"
    )
    p.add_argument("--prefix-cache-tokens", type=int, default=65536)
    p.add_argument(
        "--shared-prefix-min-tokens", type=int, default=64, help="0 turns off the shared-prefix KV of decoding rows"
    )
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.6, 1.0])
    p.add_argument("--spec-tokens", type=int, default=4)
    p.add_argument("--spec-max-tokens", type=int, default=48)
    p.add_argument("--spec-transcripts", type=int, default=3)
    p.add_argument(
        "--quick",
        action="store_true",
        help="concurrency 1 4 16, 2 turns x 16 tokens (rollout), one transcript per temperature",
    )
    p.add_argument("--out", type=Path, help="also write the report as JSON here")
    args = p.parse_args()
    if args.quick:
        args.concurrency, args.turns, args.tokens, args.spec_transcripts, args.spec_max_tokens = (
            [1, 4, 16],
            2,
            16,
            1,
            32,
        )
    return args


if __name__ == "__main__":
    arguments = parse_args()
    result = asyncio.run(main(arguments))
    if arguments.out:
        arguments.out.write_text(json.dumps(result, indent=2))
