"""Evaluation and cost configuration (RECIPE.md §6)."""

from pydantic import BaseModel, ConfigDict, Field, model_validator


class PricesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference_model: str | None = Field(None, description="Bill at this model's public price (LiteLLM name).")
    input_usd_per_mtok: float | None = Field(None, ge=0, description="USD per million input tokens.")
    cached_input_usd_per_mtok: float | None = Field(
        None, ge=0, description="USD per million cached input tokens; None bills them at the input price."
    )
    output_usd_per_mtok: float | None = Field(None, ge=0, description="USD per million output tokens.")

    @model_validator(mode="after")
    def _both_or_neither(self) -> "PricesConfig":
        if (self.input_usd_per_mtok is None) != (self.output_usd_per_mtok is None) or (
            self.cached_input_usd_per_mtok is not None and self.input_usd_per_mtok is None
        ):
            raise ValueError(
                "set input_usd_per_mtok and output_usd_per_mtok together (cached_input_usd_per_mtok is optional), "
                "or none of them to use LiteLLM's price of reference_model"
            )
        return self


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trials_per_task: int = Field(5, ge=1, description="Pass@1 is averaged over this many trials (RECIPE.md §6).")
    pass_at_k: list[int] = Field(default_factory=lambda: [1], description="k values for the unbiased pass@k.")
    prices: PricesConfig = Field(default_factory=PricesConfig)
    results_dir: str = Field("runs/eval", description="Where `fireflash eval` writes results.json, tables and trajectories.")
    setting: str = Field("", description="Label of this run on the Pareto plot, e.g. 'max effort'.")

    @model_validator(mode="after")
    def _k_fits(self) -> "EvalConfig":
        bad = [k for k in self.pass_at_k if not 1 <= k <= self.trials_per_task]
        if bad:
            raise ValueError(
                f"pass_at_k {bad} outside [1, trials_per_task={self.trials_per_task}]: pass@k needs at least k trials; "
                "raise trials_per_task or drop those k"
            )
        return self
