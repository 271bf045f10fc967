"""Evaluation and cost configuration (RECIPE.md §6)."""

from pydantic import BaseModel, ConfigDict, Field


class PricesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference_model: str | None = Field(None, description="Bill at this model's public price (LiteLLM name).")
    input_usd_per_mtok: float | None = Field(None, ge=0, description="USD per million input tokens.")
    cached_input_usd_per_mtok: float | None = Field(None, ge=0, description="USD per million cached input tokens.")
    output_usd_per_mtok: float | None = Field(None, ge=0, description="USD per million output tokens.")


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trials_per_task: int = Field(5, ge=1, description="Pass@1 is averaged over this many trials (RECIPE.md §6).")
    pass_at_k: list[int] = Field(default_factory=lambda: [1], description="k values for the unbiased pass@k.")
    prices: PricesConfig = Field(default_factory=PricesConfig)
