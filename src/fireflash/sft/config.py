"""Supervised warm-up settings (issue #10). Not part of RECIPE.md, whose model starts from a capable base."""

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fireflash.sft.oracle import VARIANTS


class SFTPass(BaseModel):
    """A further warm-up pass, trained from the previous pass's final model with its own tasks and schedule.

    Everything not named here (variants, batch size, micro-batch tokens, seed, ...) is the ``[sft]`` table's.
    It runs in ``sft.run_dir/pass-K`` (K = 2, 3, ...) with its own oracle set, metrics and checkpoints.
    """

    model_config = ConfigDict(extra="forbid")

    tasks: list[str] = Field(description="Tasks whose reference solutions are replayed; never held-out ones.")
    epochs: float = Field(1.0, gt=0, description="Passes over this pass's oracle examples.")
    lr: float = Field(1e-4, gt=0, description="Peak AdamW learning rate of this pass (cosine decay to 10%).")
    augment_copies: int = Field(0, ge=0, description="Path-renamed copies of each hand-written task.")


class SFTConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    init_from: str = Field("smollm2-135m", description="Model the warm-up starts from (embedded name or HF directory).")
    tasks: list[str] = Field(["bundled:train"], description="Tasks whose reference solutions are replayed; never held-out ones.")
    variants: list[str] = Field(list(VARIANTS), description=f"Oracle tool sequences per reference script: {', '.join(VARIANTS)}.")
    epochs: float = Field(2.0, gt=0, description="Passes over the oracle examples (fractions allowed).")
    batch_size: int = Field(16, ge=1, description="Examples (segments) per optimizer step.")
    lr: float = Field(1e-4, gt=0, description="Peak AdamW learning rate (cosine decay to 10% after warm-up).")
    warmup_steps: int = Field(3, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(0.0, ge=0)
    grad_clip_norm: float = Field(1.0, gt=0)
    micro_batch_tokens: int = Field(4096, ge=64, description="Gradient-carrying tokens per micro-batch (rows × longest row).")
    share_prefix: bool = Field(
        True, description="Run the shared system prompt once without gradient (see fireflash.sft.trainer)."
    )
    seed: int = Field(0, description="Shuffles the examples.")
    run_dir: str = Field("runs/sft", description="Oracle trajectories, metrics, checkpoints; `model` links the final checkpoint.")
    max_concurrent: int = Field(4, ge=1, description="Oracle attempts replayed at a time.")
    augment_copies: int = Field(
        0, ge=0, description="Path-renamed copies of each task added to the oracle set (RUN_DIR/augmented/, "
        "see fireflash.sft.augment); 0 trains on the tasks as they are."
    )
    passes: list[SFTPass] = Field(
        [], description="Further passes after this one, each from the previous pass's final model; "
        "RUN_DIR/model links the last pass's final checkpoint."
    )

    @field_validator("variants")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if x not in VARIANTS]
        if bad or not v:
            raise ValueError(f"unknown variants {bad}; choose one or more of {list(VARIANTS)}")
        return v
