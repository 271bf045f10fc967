"""Task pool, probing and validation-gate configuration (RECIPE.md §2, §3)."""

import re

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


class TaskSource(BaseModel):
    """One weighted source of a task mix (``[tasks.mix]``, issue 30)."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(description="Task dirs, 'bundled:SPLIT' or 'generated:N', as tasks.paths.")
    weight: float = Field(description="Share of new groups drawn from this source; weights are normalised "
                          "(any sum: 52 and 48 mean 0.52 and 0.48).")

    @field_validator("paths")
    @classmethod
    def _some_paths(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("a task source needs at least one path (a task directory, a directory of tasks, "
                             "bundled:train or generated:N); give its paths or remove the source")
        return v

    @field_validator("weight")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0:  # nan fails too (config.py names it)
            raise ValueError("a source's weight must be > 0 (weights are normalised, any sum); remove the source to "
                             "leave its tasks out")
        return v


_SOURCE_NAME = re.compile(r"[A-Za-z0-9_-]+")


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
    mix: dict[str, TaskSource] = Field(
        default_factory=dict, description="Weighted task sources, e.g. agentic = { paths = ['bundled:train'], "
        "weight = 0.52 } and swe = { paths = ['runs/swe'], weight = 0.48 } (RECIPE.md §2's mix): each new group's "
        "source is drawn by weight (deficit-based, curation/mix.py), then its task within the source. Replaces "
        "tasks.paths, which becomes the union of the sources' paths; empty: tasks.paths is one pool."
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

    @model_validator(mode="after")
    def _mix(self) -> "TasksConfig":
        if not self.mix:
            return self
        bad = [name for name in self.mix if not _SOURCE_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"tasks.mix source names {bad}: use letters, digits, '_' and '-' only (they name the "
                             "mix/<source>/* metrics)")
        union: list[str] = []
        owner: dict[str, str] = {}
        for name, source in self.mix.items():
            for path in source.paths:
                if path in owner:
                    raise ValueError(f"tasks.mix.{owner[path]}.paths and tasks.mix.{name}.paths both list {path!r}; "
                                     "a task belongs to one source: list it once")
                owner[path] = name
                union.append(path)
        # a resolved config (run_dir/config.toml) carries the union as paths: that one is not a second pool
        if "paths" in self.model_fields_set and self.paths != union:
            raise ValueError(f"tasks.paths ({self.paths}) and tasks.mix together: with a mix, each source lists its "
                             "own paths; remove tasks.paths (or move them into a [tasks.mix] source)")
        self.paths = union
        return self
