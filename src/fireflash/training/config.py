"""Trainer configuration (RECIPE.md §5: full-parameter, one optimizer update per step)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-6, gt=0.0, description="AdamW learning rate.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    grad_clip_norm: float = Field(1.0, gt=0.0, description="Global gradient-norm clip.")
    micro_batch_tokens: int = Field(8192, ge=1, description="Token budget of one forward/backward micro-batch (shared prefix once + padded suffixes); >= the context window.")
    share_prefix: bool = Field(
        True,
        description="Run the tokens a micro-batch's rows share (system prompt, a group's task turn) once, with gradient: "
        "the same gradient, ~3x fewer tokens for a GRPO group with SmolLM2's tool prompt (training/prefix.py).",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Compute dtype of forward/backward; weights and AdamW state stay fp32 (the master copy). "
        "'auto': bf16 on GPU (the trainer runs on CUDA when present), fp32 on CPU. 'bfloat16' on CPU is honoured "
        "(autocast) but slow: bf16 matmul is ~70x slower on AVX2 CPUs. 'float32': fp32 everywhere.",
    )
    checkpoint_every_steps: int = Field(1, ge=1, description="Steps between checkpoints.")
    sharded_checkpoints: bool = Field(
        False,
        description="FSDP2 trainer (more than one trainer worker): every rank writes its own shards with "
        "torch.distributed.checkpoint instead of rank 0 gathering one HF directory (for models too large to "
        "gather); the config, tokenizer and cursor are still written, and --resume reads either form, at any number "
        "of trainer workers (for the engines it first writes the shards' weights once as an HF directory, "
        "step-N/hf). The single-process trainer always writes an HF directory.",
    )
    keep_checkpoints: int = Field(2, ge=1, description="Most recent checkpoints kept on disk.")
