#!/usr/bin/env bash
# GPU check of the HTTP engines against a real server (issues 6, 31): launch SGLang or vLLM on a small model, run a
# multi-turn rollout through FireFlash's client, compare its log-probs and top-k with the trainer's forward pass
# (max |Δ|), pause with a request in flight, then a paused weight update from the trainer → version check while
# paused → resume → the new weights' log-probs against the trainer's. One prepared script, under 10 minutes on one
# GPU. See README.md in this folder.
#
#   bash benchmarks/gpu/engine_check.sh                          # ENGINE=auto: SGLang if installed, else vLLM
#   ENGINE=vllm MODEL=/models/Qwen3-0.6B bash benchmarks/gpu/engine_check.sh
#   ENGINE=vllm TRANSFER=nccl bash benchmarks/gpu/engine_check.sh   # vLLM over NCCL: needs 2 GPUs
#
# Needs: a CUDA GPU, the engine installed (pip install 'fireflash[gpu]'), a local HF model directory in MODEL
# (default: the embedded SmolLM2-135M, materialised by fireflash). No network access is used. Without a GPU or an
# engine it prints a SKIPPED line and exits 0: nothing was checked.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH=${PYTHONPATH:-$PWD/src}
ENGINE=${ENGINE:-auto}
PORT=${PORT:-30123}
OUT=${OUT:-/tmp/fireflash-engine-check}
have() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)" 2>/dev/null; }
N_GPUS=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU ' || true)
if [ "$N_GPUS" -eq 0 ]; then
  echo "SKIPPED: engine_check did not run: no CUDA GPU (nvidia-smi lists none); nothing was checked"; exit 0
fi
if [ "$ENGINE" = auto ]; then
  if have sglang; then ENGINE=sglang; elif have vllm; then ENGINE=vllm; else ENGINE=none; fi
fi
if [ "$ENGINE" = none ]; then
  echo "SKIPPED: engine_check did not run: neither sglang nor vllm is installed (pip install 'fireflash[gpu]'); nothing was checked"; exit 0
fi
if ! have "$ENGINE"; then
  echo "SKIPPED: engine_check did not run: $ENGINE is not installed (pip install 'fireflash[gpu]'); nothing was checked"; exit 0
fi
MODEL=${MODEL:-$($PY -c 'from fireflash.models import resolve_model_dir; print(resolve_model_dir("smollm2-135m"))')}
TRANSFER=${TRANSFER:-$([ "$N_GPUS" -ge 2 ] && echo nccl || echo ipc)}
mkdir -p "$OUT"
echo "engine=$ENGINE model=$MODEL port=$PORT gpus=$N_GPUS transfer=$TRANSFER out=$OUT"
exec timeout 570 "$PY" - "$ENGINE" "$MODEL" "$PORT" "$OUT" "$TRANSFER" <<'PYEOF'
import asyncio, json, os, sys, time
from pathlib import Path

import torch

from fireflash.protocols import GenerateRequest, SamplingParams

engine_kind, model_dir, port, out, transfer = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
t0 = time.time()
report = {"engine": engine_kind, "model": model_dir}
url = f"http://127.0.0.1:{port}"
trainer_device = "cuda:0"
# fp32 on the server so the logprob check measures our plumbing, not bf16 kernel noise
if engine_kind == "sglang":
    import sglang
    from fireflash.engines.sglang import SGLangEngine
    from fireflash.engines.sglang_launch import launch_sglang as launch
    report["engine_version"] = sglang.__version__
    args = {"dtype": "float32", "mem_fraction_static": 0.5, "disable_cuda_graph": True}
    transfer = "disk"
else:
    import vllm
    from fireflash.engines.vllm import VLLMEngine, launch_vllm as launch
    report["engine_version"] = vllm.__version__
    # one GPU: vLLM's CUDA IPC backend (NCCL refuses two ranks on one device; IPC posts pickled handles, which the
    # server accepts only with VLLM_ALLOW_INSECURE_SERIALIZATION=1); two: the server on GPU 0, the trainer on GPU 1,
    # NCCL through FireFlash's trainer side (engines/vllm_transfer.py)
    args = {"dtype": "float32", "gpu_memory_utilization": 0.5, "enforce_eager": True,
            "weight_transfer_config": {"backend": transfer}}
    if transfer == "ipc":
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
report["transfer"] = transfer
visible = os.environ.get("CUDA_VISIBLE_DEVICES")
if transfer == "nccl":  # the server sees GPU 0 only; this process (not yet using CUDA) keeps all and trains on 1
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    trainer_device = "cuda:1"
try:
    server = launch(model_dir, port, args, timeout_sec=300, log_path=out / "server.log")
finally:
    if visible is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
report["launch_sec"] = round(time.time() - t0, 1)
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.cuda.set_device(trainer_device)
tok = AutoTokenizer.from_pretrained(model_dir)
hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(trainer_device).eval()  # "the trainer"
engine = (SGLangEngine(url) if engine_kind == "sglang"
          else VLLMEngine(url, pause_mode="wait", transfer_backend=transfer, transfer_device=trainer_device))
stop = [tok.eos_token_id]


def trainer_logq(req, res):
    ids = torch.tensor([req.prompt_ids + res.token_ids[:-1]], device=trainer_device)
    with torch.no_grad():
        logits = hf(ids).logits[0, len(req.prompt_ids) - 1 :].float()
    return torch.log_softmax(logits / (req.params.temperature or 1.0), dim=-1).cpu()


def gaps(req, res):
    """max |Δ| of the sampled tokens' log-probs, of the top-k log-probs, and the share of top-k ids the trainer
    ranks in its own top-k (ties aside) — server against the trainer's forward of the same weights."""
    logq = trainer_logq(req, res)
    sampled = logq.gather(1, torch.tensor(res.token_ids)[:, None])[:, 0]
    out = {"sampled": (sampled - torch.tensor(res.logprobs)).abs().max().item()}
    if res.topk_ids and res.topk_ids[0]:
        k = len(res.topk_ids[0])
        ids = torch.tensor(res.topk_ids)
        out["topk"] = (logq.gather(1, ids) - torch.tensor(res.topk_logprobs)).abs().max().item()
        own = logq.topk(k, dim=-1).indices
        out["topk_id_agreement"] = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(ids, own)) / ids.numel()
    return out


async def rollout():
    """4 concurrent attempts x 3 turns; each next prompt extends the previous turn's tokens."""
    tool = tok.encode("<|im_end|>\n<|im_start|>user\nCommand output: ok<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)

    async def attempt(i):
        ids = tok.apply_chat_template([{"role": "user", "content": f"Task {i}: list the files in /app and explain."}], add_generation_prompt=True, tokenize=True, return_dict=False)
        found, turns = [], []
        for t in range(3):
            req = GenerateRequest(request_id=f"a{i}t{t}", prompt_ids=ids, params=SamplingParams(temperature=1.0, max_new_tokens=48, stop_token_ids=stop, n_top_logprobs=20))
            (res,) = await engine.generate([req])
            found.append(gaps(req, res))
            turns.append({"n": len(res.token_ids), "finish": res.finish_reason, "version": res.weight_version, "cached": res.n_cached_prompt_tokens})
            ids = ids + res.token_ids + tool
        return found, turns

    return await asyncio.gather(*(attempt(i) for i in range(4)))


async def server_version():
    if engine_kind == "sglang":
        return str((await engine.http.get("/get_model_info")).get("weight_version"))
    return await engine.server_weight_version()


async def paused_update(version):
    """pause → the trainer's weights, tagged ``version`` → the server's version while still paused → resume."""
    state = {n: t.detach() for n, t in hf.state_dict().items()}
    t = time.time()
    await engine.pause()
    try:
        if engine_kind == "sglang":
            hf.save_pretrained(out / f"ckpt_v{version}", safe_serialization=True)
            await engine.update_weights(out / f"ckpt_v{version}", version=version)
        elif transfer == "ipc":  # vLLM's IPC trainer side posts /update_weights itself (ipc_engine.py, mode 'http')
            from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferEngine

            await engine.http.post("/start_weight_update", {})
            await asyncio.to_thread(IPCWeightTransferEngine.trainer_send_weights, iter(state.items()), {"mode": "http", "url": url})
            await engine.http.post("/finish_weight_update", {"weight_version": str(version)})
        else:
            await engine.update_weights(state, version)  # the client is paused: start → update → finish only
        reported = await server_version()
        paused = (await engine.http.get("/is_paused"))["is_paused"] if engine_kind == "vllm" else None
    finally:
        await engine.resume()
    return {"reported_while_paused": reported, "is_paused": paused, "update_sec": round(time.time() - t, 2)}


async def main():
    global engine
    results = await rollout()
    found = [g for gs, _ in results for g in gs]
    report["rollout_turns"] = [t for _, ts in results for t in ts]
    report["max_logprob_gap_vs_trainer"] = max(g["sampled"] for g in found)
    report["max_topk_logprob_gap_vs_trainer"] = max(g.get("topk", 0.0) for g in found)
    report["topk_id_agreement_min"] = min(g.get("topk_id_agreement", 1.0) for g in found)
    # pause with in-flight work, then resume
    long_req = GenerateRequest(request_id="long", prompt_ids=tok.encode("Count slowly:"), params=SamplingParams(max_new_tokens=2000, n_top_logprobs=0))
    task = asyncio.create_task(engine.generate([long_req]))
    await asyncio.sleep(0.5)
    await engine.pause()
    try:
        (paused,) = await asyncio.wait_for(task, 60)
    finally:
        await engine.resume()
    report["pause"] = {"finish": paused.finish_reason, "tokens": len(paused.token_ids)}
    if engine_kind == "vllm" and transfer == "nccl":
        from fireflash.training.fsdp import free_port

        addr, port_ = "127.0.0.1", free_port()
        await asyncio.gather(engine.init_weight_sync(addr, port_, world_size=2),
                             asyncio.to_thread(engine.trainer_broadcaster, addr, port_, 2, "nccl", 300))
    elif engine_kind == "vllm":
        await engine.http.request("POST", "/init_weight_transfer_engine", {"init_info": {}}, max_retries=0)
    # the trainer moves (a perturbed copy, as after an optimizer step), then a paused update to version 1
    probe = GenerateRequest(request_id="probe", prompt_ids=tok.encode("The capital of France is"), params=SamplingParams(temperature=1.0, max_new_tokens=8, n_top_logprobs=5, seed=1))
    (before,) = await engine.generate([probe])
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "layers.0.mlp" in name:
                p.mul_(1.5)
    update = await paused_update(1)
    if engine_kind == "vllm" and transfer == "ipc":  # the client did not send the update: label its results 1
        await engine.close()
        engine = VLLMEngine(url, weight_version=1)
    (after,) = await engine.generate([probe])
    update |= {"result_version": after.weight_version, "logprobs_changed": before.logprobs != after.logprobs,
               "gaps_vs_trainer_after": gaps(probe, after)}
    report["weight_update"] = update
    await engine.close()


try:
    asyncio.run(main())
finally:
    server.terminate()
    server.wait(30)
report["total_sec"] = round(time.time() - t0, 1)
print(json.dumps(report, indent=2))
(out / "report.json").write_text(json.dumps(report, indent=2))
w = report["weight_update"]
checks = {
    "rollout log-probs match the trainer (max |Δ| < 1e-2)": report["max_logprob_gap_vs_trainer"] < 1e-2,
    "top-k log-probs match the trainer (max |Δ| < 1e-2)": report["max_topk_logprob_gap_vs_trainer"] < 1e-2,
    "pause returned the request in flight": report["pause"]["finish"] in ("abort", "length", "stop"),
    "server reports version 1 while paused": str(w["reported_while_paused"]) == "1",
    "result carries version 1 after resume": w["result_version"] == 1,
    "new weights change the log-probs": w["logprobs_changed"],
    "new weights' log-probs match the trainer (max |Δ| < 1e-2)": w["gaps_vs_trainer_after"]["sampled"] < 1e-2,
}
for name, ok in checks.items():
    print(("ok   " if ok else "FAIL ") + name)
print("ENGINE CHECK", "PASSED" if all(checks.values()) else "FAILED")
sys.exit(0 if all(checks.values()) else 1)
PYEOF
