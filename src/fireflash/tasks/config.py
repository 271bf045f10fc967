"""Task pool, probing and validation-gate configuration (RECIPE.md §2, §3)."""

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ProbeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempts_per_task: int = Field(4, ge=1, description="Base-policy attempts per candidate task (RECIPE.md §2: >= 4).")
    keep_min_pass_rate: float = Field(0.15, ge=0.0, le=1.0, description="Keep tasks with pass rate >= this.")
    keep_max_pass_rate: float = Field(0.85, ge=0.0, le=1.0, description="Keep tasks with pass rate <= this.")

    @model_validator(mode="after")
    def _range(self) -> "ProbeConfig":
        if self.keep_min_pass_rate > self.keep_max_pass_rate:
            raise ValueError(
                f"keep_min_pass_rate ({self.keep_min_pass_rate}) > keep_max_pass_rate ({self.keep_max_pass_rate})"
            )
        return self


class GatesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cold_starts: int = Field(5, ge=1, description="Gate 4: cold starts that must each succeed.")
    cold_start_deadline_sec: float = Field(30.0, gt=0, description="Gate 4: deadline of one cold start.")
    determinism_repeats: int = Field(3, ge=2, description="Gate 9: times the same final state is scored.")
    fuzz_cases: int = Field(8, ge=1, description="Gate 8: malformed workspaces scored per task.")
    leak_min_line_chars: int = Field(
        20, ge=1, description="Gate 5: solution lines at least this long (characters) must not appear in the environment."
    )


class TasksConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(default_factory=lambda: ["bundled:train"], description="Task dirs or 'bundled:SPLIT'.")
    pool_manifest: str | None = Field(None, description="Probe manifest; when set, only its kept tasks are trained on.")
    gate_reports_dir: str | None = Field(
        None, description="Directory of gate reports (`fireflash tasks validate --report-dir DIR`); when set, every "
        "pool task needs a passing report there, and the free checks gate 6 found in it earn no partial credit."
    )
    allow_heldout: bool = Field(
        False, description="Let `fireflash train` train on bundled held-out tasks (refused by default: held-out "
        "scores of a policy trained on them mean nothing)."
    )
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    gates: GatesConfig = Field(default_factory=GatesConfig)

    @field_validator("paths")
    @classmethod
    def _some(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("no task paths; give at least one task directory, directory of tasks, bundled:train or "
                             "generated:N")
        return v
