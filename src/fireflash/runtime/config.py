"""Runtime configuration: the async loop's sizes (RECIPE.md §1, §5)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RuntimeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "ray"] = Field("local", description="'local' (asyncio + threads) or 'ray' (actors).")
    mode: Literal["async", "sync"] = Field("async", description="'sync' exists only as the idle-time baseline.")
    steps: int = Field(10, ge=1, description="Optimizer steps to run.")
    group_size: int = Field(12, ge=2, description="Attempts per task in a GRPO group (RECIPE.md §5).")
    groups_per_step: int = Field(1, ge=1, description="Groups consumed by one optimizer step.")
    max_inflight_attempts: int = Field(16, ge=1, description="Attempts kept running at all times.")
    discard_zero_signal_groups: bool = Field(True, description="Drop groups whose R' are all equal (RECIPE.md §1).")
    max_attempt_retries: int = Field(2, ge=0, description="Retries of an attempt lost to infrastructure.")
    max_wall_sec: float | None = Field(
        None, gt=0, description="Stop cleanly (checkpointed) once the run has taken this long, seconds; None: no limit."
    )
    hang_margin_sec: float = Field(
        60.0, gt=0, description="Seconds past a task's agent/verifier limit after which a hung stage is cancelled."
    )
    threads_per_role: int | None = Field(
        None, ge=1,
        description="Local backend: torch threads for each of the engine and the trainer, which run at once "
        "(the local half-and-half split); None = half the cores.",
    )
    seed: int = Field(0, description="Seed of task order and sampling.")
