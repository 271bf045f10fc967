#!/usr/bin/env bash
# GPU check of the scale-out path (issue 11): an SGLang server and one FSDP2 trainer process (torchrun) share
# the machine; three asynchronous GRPO steps on the bundled tasks; after every step the trainer broadcasts its
# weights to the server through a dedicated weight-update group (pause 'retract' → update → continue).
# Prints step time, tokens/s, the staleness histogram and the trainer/engine log-prob gap per staleness.
# One prepared script, under 10 minutes on one H200. See README.md in this folder.
#
#   MODEL=/models/Qwen2.5-0.5B-Instruct bash benchmarks/gpu/scale_check.sh
#   bash benchmarks/gpu/scale_check.sh /models/Qwen2.5-0.5B-Instruct
#
# Weight-sync backend (SYNC_BACKEND, default auto): NCCL needs the server on another GPU than the trainer
# (NCCL refuses two ranks on one device), so 'auto' puts the server on GPU 1 with NCCL when there are two
# GPUs, and uses gloo (CUDA tensors staged through host memory, same endpoints) on a single GPU.
# Needs: CUDA, SGLang (pip install 'fireflash[gpu]'), a local HF model directory (no network is used);
# bubblewrap for sandboxes (falls back to the unsafe-local backend with a warning when it is missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
MODEL=${1:-${MODEL:?set MODEL (or pass it as the first argument) to a local HF model directory, e.g. Qwen2.5-0.5B-Instruct}}
PORT=${PORT:-30124}
OUT=${OUT:-/tmp/fireflash-scale-check}
SYNC_BACKEND=${SYNC_BACKEND:-auto}
STEPS=${STEPS:-3}
mkdir -p "$OUT"
echo "model=$MODEL port=$PORT out=$OUT sync=$SYNC_BACKEND steps=$STEPS"
cat > "$OUT/scale_driver.py" <<'PYEOF'
import asyncio, json, sys, time
from collections import Counter
from pathlib import Path

import torch

from fireflash.config import load_config
from fireflash.engines.sglang import SGLangEngine
from fireflash.engines.sglang_launch import launch_sglang
from fireflash.engines.weight_sync import apply_between_turns, init_weight_update_group, tensor_broadcaster
from fireflash.grading import make_grader
from fireflash.models import load_policy, load_tokenizer
from fireflash.protocols import GenerateRequest, SamplingParams
from fireflash.runtime.local import LocalRuntime
from fireflash.sandbox import SandboxUnavailable, make_backend
from fireflash.curation.pool import load_pool
from fireflash.training.fsdp import FSDPTrainer, free_port, init_trainer_group_from_env

model_dir, out, port, sync_backend, steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
t0 = time.time()
report = {"model": model_dir, "gpus": torch.cuda.device_count()}
two_gpus = torch.cuda.device_count() >= 2
if sync_backend == "auto":
    sync_backend = "nccl" if two_gpus else "gloo"
report["sync_backend"] = sync_backend
cfg = load_config("configs/local.toml", [
    f'model.name_or_path="{model_dir}"', 'engine.kind="sglang"', f"runtime.steps={steps}", "runtime.group_size=4",
    "runtime.groups_per_step=2", "runtime.max_inflight_attempts=16", "runtime.discard_zero_signal_groups=false",
    "runtime.max_wall_sec=330", 'training.dtype="bfloat16"', "training.lr=1e-5", "training.micro_batch_tokens=16384",
    f"training.checkpoint_every_steps={steps}", f'tracking.run_dir="{out / "run"}"', "tracking.tensorboard=false",
])

# 1. the rollout engine: SGLang in bf16 on its own share of the GPU (or on GPU 1 for NCCL)
server_args = {"dtype": "bfloat16", "mem_fraction_static": 0.35}
if sync_backend == "nccl":
    server_args["base_gpu_id"] = 1
server = launch_sglang(model_dir, port, server_args, timeout_sec=300, log_path=out / "server.log")
report["server_launch_sec"] = round(time.time() - t0, 1)


class SyncedEngine:
    """The runtime's engine: SGLang, counting sampled tokens; weight updates go pause → broadcast → continue."""

    def __init__(self, engine):
        self.engine, self.sampled_tokens, self.sync_sec = engine, 0, []

    @property
    def weight_version(self):
        return self.engine.weight_version

    async def generate(self, requests):
        results = await self.engine.generate(requests)
        self.sampled_tokens += sum(len(r.token_ids) for r in results)
        return results

    async def update_weights(self, weights, version):
        start = time.perf_counter()
        bf16 = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()}
        await apply_between_turns(self.engine, bf16, version)
        self.sync_sec.append(round(time.perf_counter() - start, 2))

    async def pause(self):
        await self.engine.pause()

    async def resume(self):
        await self.engine.resume()


async def main():
    # 2. the trainer: FSDP2 over this torchrun world (1 rank), fp32 master weights, bf16 compute, fp32 reduce
    device = init_trainer_group_from_env()
    tokenizer = load_tokenizer(model_dir)
    trainer = FSDPTrainer(load_policy(model_dir, dtype="float32"), tokenizer, cfg.training, cfg.rl,
                          temperature=cfg.harness.sampling.temperature, device=device)
    report["trainer_ready_sec"] = round(time.time() - t0, 1)
    # 3. the weight-update group: trainer = rank 0, the server joins as rank 1 (HTTP call and join run together)
    sglang = SGLangEngine(f"http://127.0.0.1:{port}", pause_mode="retract", flush_cache=False)
    sync_port = free_port()
    _, group = await asyncio.gather(
        sglang.init_weight_sync("127.0.0.1", sync_port, world_size=2, backend=sync_backend),
        asyncio.to_thread(init_weight_update_group, "127.0.0.1", sync_port, 0, 2, sync_backend),
    )
    sglang.broadcast = tensor_broadcaster(group, "cuda" if sync_backend == "nccl" else "cpu")
    report["group_ready_sec"] = round(time.time() - t0, 1)
    # 4. tasks, sandboxes, graders, and the asynchronous loop of `fireflash train`
    tasks = load_pool(cfg.tasks.paths, cfg.tasks.pool_manifest)
    try:
        backend = make_backend(cfg.sandbox)
    except SandboxUnavailable as e:
        print(f"WARNING: bwrap unavailable ({e}); using the unsafe-local sandbox backend for this check")
        backend = make_backend(cfg.sandbox.model_copy(update={"backend": "unsafe-local"}))
        report["sandbox"] = "unsafe-local"
    graders = {}
    engine = SyncedEngine(sglang)
    runtime = LocalRuntime(
        tasks=tasks, backend=backend, engine=engine, tokenizer=tokenizer, trainer=trainer,
        grader_for=lambda task: graders.setdefault(task.id, make_grader(task.grader)),
        harness=cfg.harness, objective=cfg.rl, run_dir=Path(cfg.tracking.run_dir), steps=cfg.runtime.steps,
        group_size=cfg.runtime.group_size, groups_per_step=cfg.runtime.groups_per_step,
        max_inflight_attempts=cfg.runtime.max_inflight_attempts, max_attempt_retries=cfg.runtime.max_attempt_retries,
        discard_zero_signal_groups=cfg.runtime.discard_zero_signal_groups, seed=cfg.runtime.seed, mode="async",
        hang_margin_sec=cfg.runtime.hang_margin_sec, max_wall_sec=cfg.runtime.max_wall_sec,
        checkpoint_every_steps=cfg.training.checkpoint_every_steps,
    )
    start = time.perf_counter()
    try:
        await runtime.run()
    finally:
        await backend.close()
    wall = time.perf_counter() - start
    history = runtime.history
    staleness, drift = Counter(), {}
    for m in history:
        for key, value in m.items():
            if key.startswith("tokens/staleness_"):
                staleness[key.removeprefix("tokens/staleness_")] += int(value)
    for bucket in staleness:  # token-weighted mean over steps of mean |log p_trainer - log p_engine|
        pairs = [(m[f"drift/staleness_{bucket}"], m[f"tokens/staleness_{bucket}"]) for m in history if f"drift/staleness_{bucket}" in m]
        drift[bucket] = round(sum(d * n for d, n in pairs) / max(sum(n for _, n in pairs), 1), 4)
    trained_tokens = sum(m.get("tokens/n", 0.0) for m in history)
    report.update({
        "steps_done": trainer.step, "engine_weight_version": sglang.weight_version, "loop_wall_sec": round(wall, 1),
        "step_sec": [round(m["step_sec"], 2) for m in history],
        "step_wall_sec": [round(b["wall_sec"] - a["wall_sec"], 1) for a, b in zip([{"wall_sec": 0.0}] + history, history)],
        "weight_sync_sec": engine.sync_sec,
        "rollout_tokens_per_sec": round(engine.sampled_tokens / wall, 1),
        "trainer_tokens_per_sec": round(trained_tokens / max(sum(m["step_sec"] for m in history), 1e-9), 1),
        "staleness_histogram_tokens": dict(sorted(staleness.items())),
        "logprob_gap_by_staleness": dict(sorted(drift.items())),
        "reference_gap": {"1": 0.065, "4-6": 0.08},
        "groups_lost": runtime.total.groups_lost, "attempts": runtime.total.attempts,
    })
    # 5. the server now serves the trainer's final weights: greedy tokens scored by both sides
    weights = trainer.state_dict()
    probe_ids = tokenizer.apply_chat_template([{"role": "user", "content": "List the files in /app."}],
                                              add_generation_prompt=True, tokenize=True, return_dict=False)
    (res,) = await sglang.generate([GenerateRequest(request_id="probe", prompt_ids=probe_ids,
                                                    params=SamplingParams(temperature=0.0, max_new_tokens=16, n_top_logprobs=1))])
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
    ref.load_state_dict({k: v.to(torch.bfloat16) for k, v in weights.items()}, strict=False)
    ids = torch.tensor([probe_ids + res.token_ids[:-1]], device="cuda")
    with torch.no_grad():
        logq = torch.log_softmax(ref(ids).logits[0, len(probe_ids) - 1 :].float(), -1)
    mine = logq.gather(1, torch.tensor(res.token_ids, device="cuda")[:, None])[:, 0].cpu()
    report["final_weights_probe"] = {"version": res.weight_version,
                                     "max_logprob_gap": round((mine - torch.tensor(res.logprobs)).abs().max().item(), 4)}
    await sglang.close()


try:
    asyncio.run(main())
finally:
    server.terminate()
    server.wait(30)
report["total_sec"] = round(time.time() - t0, 1)
print(json.dumps(report, indent=2))
(out / "report.json").write_text(json.dumps(report, indent=2))
gaps = report.get("logprob_gap_by_staleness", {})
ok = (report.get("steps_done") == steps and report.get("engine_weight_version") == steps
      and len(report.get("weight_sync_sec", [])) == steps and bool(gaps) and max(gaps.values()) < 0.5
      and report.get("final_weights_probe", {}).get("version") == steps
      and report["final_weights_probe"]["max_logprob_gap"] < 0.5)
print("SCALE CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
PYEOF
TORCHRUN=${TORCHRUN:-$(dirname "$PY")/torchrun}
[ -x "$TORCHRUN" ] || TORCHRUN=torchrun
exec timeout 570 "$TORCHRUN" --standalone --nproc-per-node 1 "$OUT/scale_driver.py" "$MODEL" "$OUT" "$PORT" "$SYNC_BACKEND" "$STEPS"
