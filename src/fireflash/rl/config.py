"""Objective configuration: every constant of RECIPE.md §5 with its reference default."""

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ObjectiveConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    solve_reward: float = Field(1.5, description="R' of a solved attempt (success shift, RECIPE.md §5).")
    partial_reward_scale: float = Field(0.5, ge=0.0, description="R' = scale * R for unsolved attempts.")
    length_bonus_max: float = Field(0.2, ge=0.0, description="b = max * (1 - tokens / max solved tokens).")
    length_bonus_min_solved: int = Field(2, ge=1, description="The length bonus needs at least this many solves.")
    length_bonus_scale: float = Field(0.5, gt=0.0, description="A += (b - mean b) / scale.")
    std_floor: float = Field(1e-6, gt=0.0, description="Floor on std R' (round-off guard).")
    tis: bool = Field(True, description="Truncated importance sampling.")
    tis_clip_low: float = Field(0.5, gt=0.0, description="Lower clip of p_trainer / p_rollout.")
    tis_clip_high: float = Field(2.0, gt=0.0, description="Upper clip of p_trainer / p_rollout.")
    score_centering: bool = Field(True, description="Subtract the sampler's expected score over its top-k.")
    score_centering_topk: int = Field(32, ge=1, description="K candidates used for centering (engine returns top-32).")
    score_centering_renormalize: bool = Field(True, description="Renormalise q over the top-k set before centering.")
    loss_floor_tokens: int = Field(2048, ge=1, description="Per-attempt loss denominator is max(tokens, this).")
    max_staleness: int = Field(6, ge=0, description="Turns more than this many versions behind are masked out.")
    logprob_chunk_tokens: int = Field(512, ge=1, description="Positions per chunk of the vocabulary projection.")
    entropy_window_steps: int = Field(10, ge=2, description="Steps in the entropy-rise detector's window.")
    entropy_rise_threshold: float = Field(0.05, gt=0.0, description="Rise of windowed mean entropy that raises the warning.")

    @model_validator(mode="after")
    def _clip_order(self) -> "ObjectiveConfig":
        if not self.tis_clip_low < 1.0 < self.tis_clip_high:
            raise ValueError(
                f"tis_clip_low ({self.tis_clip_low}) must be < 1 < tis_clip_high ({self.tis_clip_high})"
            )
        return self
