"""Engine configuration. An engine's own flags pass straight through in `args` (STYLE.md 6)."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["local", "sglang", "vllm", "scripted"] = Field(
        "local", description="'local' (transformers, in process), 'sglang' / 'vllm' (HTTP servers), 'scripted' (tests)."
    )
    url: str | None = Field(None, description="Server base URL for sglang/vllm, e.g. http://127.0.0.1:30000.")
    max_batch_size: int = Field(16, ge=1, description="Concurrent sequences decoded together by the local engine.")
    prompt_lookup_tokens: int = Field(0, ge=0, description="Prompt-lookup speculative tokens per step; 0 disables.")
    num_threads: int | None = Field(None, ge=1, description="torch threads for the local engine; None = half the cores.")
    request_timeout_sec: float = Field(600.0, gt=0, description="Per-request timeout for HTTP engines.")
    max_retries: int = Field(3, ge=0, description="Retries with backoff on connection errors and 5xx.")
    seed: int = Field(0, description="Sampling seed (local engine is deterministic given it).")
    args: dict[str, Any] = Field(default_factory=dict, description="Engine's own server flags, passed through verbatim.")
