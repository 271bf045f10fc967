"""`fireflash train` with engine.kind = 'vllm' (issue 31) on the local backend against the vLLM-faithful stand-in: the
trainer pushes its weights through vLLM's weight-transfer routes before anything is sampled, and attempts are
sampled and graded through vLLM's completions. The tiny model never solves the task, so no optimizer step is taken
in the ~10 s run; the push after a step is the same ``update_weights`` call, covered by test_vllm_standin.py."""

from pathlib import Path

import httpx
import pytest

from fireflash.config import FireFlashConfig
from fireflash.engines.local import LocalEngine
from fireflash.engines.vllm_serve import vllm_standin
from fireflash.models import build_tiny_model, build_tiny_tokenizer, load_policy
from fireflash.runtime.job import run_training

TASK = Path(__file__).resolve().parents[2] / "src" / "fireflash" / "tasks" / "data" / "train" / "text-count-lines"


class _Counting:
    """The served engine, counting what the server asked of it."""

    def __init__(self, engine):
        self.engine, self.updates, self.generated = engine, [], 0

    def __getattr__(self, name):
        return getattr(self.engine, name)

    async def generate(self, requests):
        self.generated += len(requests)
        return await self.engine.generate(requests)

    async def update_weights(self, weights, version):
        self.updates.append(version)
        await self.engine.update_weights(weights, version)


@pytest.mark.sandbox
@pytest.mark.integration
def test_train_drives_a_vllm_server(tmp_path):
    base, run_dir = tmp_path / "base", tmp_path / "run"
    tok = build_tiny_tokenizer()
    build_tiny_model(len(tok)).save_pretrained(base)
    tok.save_pretrained(base)
    engine = _Counting(LocalEngine(load_policy(str(base)), max_batch_size=2, num_threads=1))
    server = vllm_standin(engine,
                          served_model_name="tiny", weight_transfer_config={"backend": "gloo"},
                          enable_prompt_tokens_details=True, weight_sync_timeout_sec=60)
    url = server.start()
    try:
        cfg = FireFlashConfig.model_validate({
            "model": {"name_or_path": str(base)},
            "tasks": {"paths": [str(TASK)]},
            "engine": {"kind": "vllm", "url": url, "served_model_name": "tiny", "weight_sync_timeout_sec": 120,
                       "request_timeout_sec": 60, "args": {"weight_transfer_config": {"backend": "gloo"}}},
            "harness": {"max_turns": 1, "context_window_tokens": 4000, "max_total_tokens": 4000,
                        "sampling": {"max_new_tokens_per_turn": 8, "n_top_logprobs": 4}},
            "rl": {"score_centering": False},
            "training": {"micro_batch_tokens": 4096},
            "runtime": {"steps": 1, "group_size": 2, "max_inflight_attempts": 2, "threads_per_role": 1,
                        "max_wall_sec": 10},
            "tracking": {"run_dir": str(run_dir), "tensorboard": False, "save_trajectories": False},
        })
        assert run_training(cfg) == run_dir
        version = httpx.get(f"{url}/weight_info").json()["weight_version"]
    finally:
        server.close()
    assert version == "0"  # the trainer's weights, tagged with its version, reached the server before sampling
    assert engine.updates == [0] and engine.generated > 0
