#!/usr/bin/env bash
# GPU check of the HTTP engines (issue 6): launch SGLang (or vLLM) on a small model, run a multi-turn rollout
# through FireFlash's client, compare its logprobs with a transformers forward pass, exercise pause and a
# weight update. One prepared script, under 10 minutes on one GPU. See README.md in this folder.
#
#   ENGINE=sglang bash benchmarks/gpu/engine_check.sh            # default
#   ENGINE=vllm MODEL=/models/Qwen3-0.6B bash benchmarks/gpu/engine_check.sh
#
# Needs: a CUDA GPU, the engine installed (pip install 'fireflash[gpu]'), a local HF model directory in MODEL
# (default: the embedded SmolLM2-135M, materialised by fireflash). No network access is used.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
ENGINE=${ENGINE:-sglang}
PORT=${PORT:-30123}
OUT=${OUT:-/tmp/fireflash-engine-check}
MODEL=${MODEL:-$($PY -c 'from fireflash.models import resolve_model_dir; print(resolve_model_dir("smollm2-135m"))')}
mkdir -p "$OUT"
echo "engine=$ENGINE model=$MODEL port=$PORT out=$OUT"
exec timeout 570 "$PY" - "$ENGINE" "$MODEL" "$PORT" "$OUT" <<'PYEOF'
import asyncio, json, sys, time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fireflash.protocols import GenerateRequest, SamplingParams

engine_kind, model_dir, port, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
t0 = time.time()
report = {"engine": engine_kind, "model": model_dir}
# fp32 on the server so the logprob check measures our plumbing, not bf16 kernel noise
if engine_kind == "sglang":
    from fireflash.engines.sglang import SGLangEngine, launch_sglang as launch
    args = {"dtype": "float32", "mem_fraction_static": 0.5, "disable_cuda_graph": True}
else:
    from fireflash.engines.vllm import VLLMEngine, launch_vllm as launch
    args = {"dtype": "float32", "gpu_memory_utilization": 0.5, "enforce_eager": True}
server = launch(model_dir, port, args, timeout_sec=300, log_path=out / "server.log")
report["launch_sec"] = round(time.time() - t0, 1)
tok = AutoTokenizer.from_pretrained(model_dir)
hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
url = f"http://127.0.0.1:{port}"
engine = SGLangEngine(url) if engine_kind == "sglang" else VLLMEngine(url)
stop = [tok.eos_token_id]


def teacher_gap(req, res):
    ids = torch.tensor([req.prompt_ids + res.token_ids[:-1]], device="cuda")
    with torch.no_grad():
        logits = hf(ids).logits[0, len(req.prompt_ids) - 1 :].float()
    logq = torch.log_softmax(logits / (req.params.temperature or 1.0), dim=-1)
    ref = logq.gather(1, torch.tensor(res.token_ids, device="cuda")[:, None])[:, 0].cpu()
    return (ref - torch.tensor(res.logprobs)).abs().max().item()


async def rollout():
    """4 concurrent attempts x 3 turns; each next prompt extends the previous turn's tokens."""
    tool = tok.encode("<|im_end|>\n<|im_start|>user\nCommand output: ok<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)

    async def attempt(i):
        ids = tok.apply_chat_template([{"role": "user", "content": f"Task {i}: list the files in /app and explain."}], add_generation_prompt=True, tokenize=True, return_dict=False)
        gaps, turns = [], []
        for t in range(3):
            req = GenerateRequest(request_id=f"a{i}t{t}", prompt_ids=ids, params=SamplingParams(temperature=1.0, max_new_tokens=48, stop_token_ids=stop, n_top_logprobs=20))
            (res,) = await engine.generate([req])
            gaps.append(teacher_gap(req, res))
            turns.append({"n": len(res.token_ids), "finish": res.finish_reason, "version": res.weight_version, "cached": res.n_cached_prompt_tokens})
            ids = ids + res.token_ids + tool
        return gaps, turns

    return await asyncio.gather(*(attempt(i) for i in range(4)))


async def main():
    results = await rollout()
    gaps = [g for gs, _ in results for g in gs]
    report["rollout_turns"] = [t for _, ts in results for t in ts]
    report["max_logprob_gap_vs_forward"] = max(gaps)
    # pause with in-flight work, then resume
    long_req = GenerateRequest(request_id="long", prompt_ids=tok.encode("Count slowly:"), params=SamplingParams(max_new_tokens=2000, n_top_logprobs=0))
    task = asyncio.create_task(engine.generate([long_req]))
    await asyncio.sleep(0.5)
    await engine.pause()
    (paused,) = await asyncio.wait_for(task, 60)
    await engine.resume()
    report["pause"] = {"finish": paused.finish_reason, "tokens": len(paused.token_ids)}
    # weight update: a perturbed copy of the model, then the same request again
    probe = GenerateRequest(request_id="probe", prompt_ids=tok.encode("The capital of France is"), params=SamplingParams(temperature=0.0, max_new_tokens=8, n_top_logprobs=5))
    (before,) = await engine.generate([probe])
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "layers.0.mlp" in name:
                p.mul_(1.5)
    if engine_kind == "sglang":
        hf.save_pretrained(out / "ckpt_v1", safe_serialization=True)
        await engine.update_weights(out / "ckpt_v1", version=1)
        (after,) = await engine.generate([probe])
        report["weight_update"] = {"version_after": after.weight_version, "logprobs_changed": before.logprobs != after.logprobs, "gap_vs_new_forward": teacher_gap(probe, after)}
    else:
        report["weight_update"] = "skipped: vLLM receives weights only over NCCL/IPC from a trainer process (see README)"
    await engine.close()


try:
    asyncio.run(main())
finally:
    server.terminate()
    server.wait(30)
report["total_sec"] = round(time.time() - t0, 1)
print(json.dumps(report, indent=2))
(out / "report.json").write_text(json.dumps(report, indent=2))
ok = report["max_logprob_gap_vs_forward"] < 1e-2 and report["pause"]["finish"] in ("abort", "length")
if isinstance(report["weight_update"], dict):
    ok &= report["weight_update"]["version_after"] == 1 and report["weight_update"]["logprobs_changed"] and report["weight_update"]["gap_vs_new_forward"] < 1e-2
print("ENGINE CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
PYEOF
