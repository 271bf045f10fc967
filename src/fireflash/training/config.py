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
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="'auto': fp32 on CPU, bf16 on GPU.")
    checkpoint_every_steps: int = Field(1, ge=1, description="Steps between checkpoints.")
    keep_checkpoints: int = Field(2, ge=1, description="Most recent checkpoints kept on disk.")
