"""Engine configuration. An engine's own flags pass straight through in `args` (STYLE.md 6)."""

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["local", "sglang", "vllm", "scripted"] = Field(
        "local",
        description="'local' (transformers, in process), 'sglang' / 'vllm' (HTTP servers), 'scripted' (tests).",
    )
    url: str | None = Field(
        None, description="Server base URL for sglang/vllm, e.g. http://127.0.0.1:30000. On the Ray backend: None "
        "launches runtime.ray's engine servers (and restarts them); a URL uses that one server as it is."
    )
    server: Literal["native", "fireflash"] = Field(
        "native", description="The server FireFlash launches for engine.kind = 'sglang' on the Ray backend: 'native' "
        "= SGLang itself (engine.args are its flags); 'fireflash' = FireFlash's SGLang-compatible server over the local "
        "transformers engine (CPU nodes; engines/serve.py)."
    )
    weight_sync: Literal["collective", "disk"] = Field(
        "collective", description="How new weights reach engine servers after each step: 'collective' (one broadcast "
        "from trainer rank 0 through a weight-update group, NCCL on GPUs / gloo on CPU) or 'disk' (an HF directory "
        "under the run directory that each server loads; it must be on storage every node sees)."
    )
    weight_sync_timeout_sec: float = Field(
        900.0, gt=0, description="A server that does not join the weight-update group, or a transfer that stalls, "
        "fails after this many seconds. SGLang takes an update once the turns it is sampling have finished, so this "
        "must exceed the longest turn, request_timeout_sec (`fireflash train` checks it); a failed member is dropped, "
        "recovered and caught up."
    )
    weight_sync_bucket_mb: int = Field(
        1024, ge=1, description="SGLang: the most MiB of tensors one /update_weights_from_distributed call lists; a "
        "state dict moves in calls of at most this size (a larger tensor goes alone), under /pause_generation when "
        "there are several. SGLang allocates every tensor a call lists, unsharded on every tensor-parallel rank, "
        "beside mem_fraction_static: keep it well under the memory that leaves free (engines/sglang.py)."
    )
    max_batch_size: int = Field(
        16, ge=1, description="Concurrent sequences decoded together by the local engine."
    )
    prompt_lookup_tokens: int = Field(
        0, ge=0, description="Prompt-lookup speculative tokens per step; 0 disables."
    )
    prompt_lookup_ngram_max: int = Field(
        3, ge=1, description="Longest suffix n-gram matched for prompt-lookup drafts, tokens."
    )
    prefix_cache_tokens: int = Field(
        32768,
        ge=0,
        description="Local engine: KV of finished sequences kept for reuse by later turns, tokens; 0 disables.",
    )
    prefill_chunk_tokens: int = Field(
        256,
        ge=1,
        description="Local engine: most prompt tokens prefilled per forward, packed with the decode rows "
        "(chunked prefill); larger chunks use the matmuls better, smaller ones stall decoding less.",
    )
    shared_prefix_min_tokens: int = Field(
        64,
        ge=0,
        description="Local engine: decoding rows whose prompts share at least this many leading tokens (the "
        "system prompt) read one copy of that prefix's KV once per step; 0 disables.",
    )
    rollout_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Local engine: dtype of the rollout copy of the weights. Lower precision creates the "
        "trainer/rollout mismatch TIS corrects; off by default (bf16 matmul is ~70x slower on AVX2 CPUs).",
    )
    num_threads: int | None = Field(
        None, ge=1, description="torch threads of the local engine's worker thread (set inside it; other threads "
        "keep theirs). Takes precedence over runtime.threads_per_role in `fireflash train`; None there = "
        "runtime.threads_per_role, elsewhere (serve, eval) = half the cores; on Ray = the worker's CPU reservation."
    )
    request_timeout_sec: float = Field(600.0, gt=0, description="Per-request timeout for HTTP engines.")
    max_retries: int = Field(3, ge=0, description="Retries with backoff on connection errors and 5xx.")
    retry_backoff_sec: float = Field(0.5, ge=0, description="First retry delay, seconds; doubles per retry.")
    pause_mode: str = Field(
        "abort",
        description="HTTP engines: what pause() does to in-flight requests. SGLang: 'abort' | 'retract' | "
        "'in_place'; vLLM: 'abort' | 'wait' | 'keep'. 'abort' returns them with finish_reason 'abort' and "
        "the tokens sampled so far, all on the old weight version (SGLang's own default). SGLang's 'retract' sends "
        "them back to its queue and recomputes them on the new weights (a turn then spans two versions, the oldest "
        "counting for staleness): what configs/cluster.toml uses, so an update costs no attempt; 'in_place' keeps them "
        "with their KV cache, and they go on on the new weights over KV the old ones wrote (also two versions; "
        "refused with flush_cache). A vLLM weight update's own pause is always 'wait' (running turns finish on the old weights).",
    )
    served_model_name: str | None = Field(
        None, description="vLLM: the `model` field of completion requests; None asks /v1/models."
    )
    seed: int = Field(0, description="Sampling seed (local engine is deterministic given it).")
    args: dict[str, Any] = Field(
        default_factory=dict, description="Engine's own server flags, passed through verbatim."
    )


def weight_transfer_backend(args: Mapping[str, Any] | None) -> str:
    """The backend of vLLM's ``--weight-transfer-config`` in a server's ``engine.args`` ('nccl' when unset, as vLLM).

    Here rather than in ``vllm.py`` so that placement (``fireflash train --dry-run``) reads it without torch.

    Raises:
        TypeError: the value is neither a dict nor a JSON object.
    """
    value = (args or {}).get("weight_transfer_config") or (args or {}).get("--weight-transfer-config") or {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, Mapping):
        raise TypeError(f"engine.args.weight_transfer_config = {value!r}: give a table, e.g. {{backend = 'nccl'}}")
    return str(value.get("backend", "nccl"))
