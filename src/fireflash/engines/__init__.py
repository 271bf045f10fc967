"""engines stage of the FireFlash pipeline: token ids in → sampled ids, logprobs, top-k, weight version out.

``make_engine`` builds the engine a config names; every engine implements ``fireflash.protocols.Engine``.
Imports are lazy so that the HTTP clients never pull in the model stack and vice versa.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from fireflash.engines.config import EngineConfig


def make_engine(
    cfg: EngineConfig,
    model_name_or_path: str,
    *,
    model: Any = None,
    tokenizer: Any = None,
    script: Sequence[str] = (),
    cache_dir: str | None = None,
    broadcast: Any = None,
    transport: Any = None,
) -> Any:
    """The engine ``cfg.kind`` names, with flat arguments taken from ``cfg`` (STYLE.md 15).

    Args:
        cfg: the ``engine`` section of the run config.
        model_name_or_path: embedded name or HF directory (local: weights; scripted: tokenizer).
        model: an already loaded causal LM for 'local' / 'scripted' (skips loading).
        tokenizer / script: for 'scripted' (the harness' test engine).
        cache_dir: cache root for embedded models.
        broadcast: trainer-side weight sender for state-dict updates of 'sglang' / 'vllm'.
        transport: httpx transport override for 'sglang' / 'vllm' (tests).

    Raises:
        ValueError: 'sglang' / 'vllm' without ``engine.url``.
    """
    if cfg.kind == "local":
        from fireflash.engines.local import LocalEngine
        from fireflash.models import load_policy

        return LocalEngine(
            model if model is not None else load_policy(model_name_or_path, cache_dir),
            max_batch_size=cfg.max_batch_size,
            prompt_lookup_tokens=cfg.prompt_lookup_tokens,
            prompt_lookup_ngram_max=cfg.prompt_lookup_ngram_max,
            prefix_cache_tokens=cfg.prefix_cache_tokens,
            prefill_chunk_tokens=cfg.prefill_chunk_tokens,
            shared_prefix_min_tokens=cfg.shared_prefix_min_tokens,
            seed=cfg.seed,
            num_threads=cfg.num_threads or max(1, (os.cpu_count() or 2) // 2),
            rollout_dtype=cfg.rollout_dtype,
        )
    if cfg.kind in ("sglang", "vllm"):
        if not cfg.url:
            raise ValueError(
                f"engine.url is required for engine.kind = {cfg.kind!r} (e.g. http://127.0.0.1:30000); start a server "
                f"with fireflash.engines.{cfg.kind}.launch_{cfg.kind}(...) or benchmarks/gpu/engine_check.sh"
            )
        common = {
            "timeout_sec": cfg.request_timeout_sec,
            "max_retries": cfg.max_retries,
            "backoff_sec": cfg.retry_backoff_sec,
            "pause_mode": cfg.pause_mode,
            "broadcast": broadcast,
            "transport": transport,
        }
        if cfg.kind == "sglang":
            from fireflash.engines.sglang import SGLangEngine
            from fireflash.engines.sglang_launch import deterministic_inference

            return SGLangEngine(cfg.url, weight_sync_timeout_sec=cfg.weight_sync_timeout_sec,
                                bucket_bytes=cfg.weight_sync_bucket_mb << 20,
                                # FireFlash's server honours seeds; SGLang only with deterministic inference
                                send_sampling_seed=cfg.server == "fireflash" or deterministic_inference(cfg.args),
                                **common)
        from fireflash.engines.vllm import VLLMEngine, weight_transfer_backend

        return VLLMEngine(cfg.url, model=cfg.served_model_name, transfer_backend=weight_transfer_backend(cfg.args),
                          **common)
    if cfg.kind == "scripted":
        from fireflash.engines.scripted import ScriptedEngine
        from fireflash.models import load_tokenizer

        return ScriptedEngine(
            tokenizer if tokenizer is not None else load_tokenizer(model_name_or_path, cache_dir),
            script,
            model=model,
            seed=cfg.seed,
        )
    raise ValueError(f"engine.kind {cfg.kind!r}: use 'local', 'sglang', 'vllm' or 'scripted'")


__all__ = ["EngineConfig", "make_engine"]
