"""Runtime configuration: the async loop's sizes (RECIPE.md §1, §5) and, for the Ray backend, placement."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fireflash.curation.config import CurationConfig


class RayConfig(BaseModel):
    """``[runtime.ray]``: the cluster a Ray run assumes and how its roles share it (RECIPE.md §1).

    GPUs are split between the trainer workers and the rollout engines (reference: half and half);
    sandboxes and graders are CPU work inside rollout workers, which Ray spreads over any node.
    ``fireflash train --dry-run`` prints the resulting placement without starting anything.
    """

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None, description="Ray cluster to join: 'auto' (a cluster started with `ray start` on this node) or "
        "'ray://host:10001'; None starts a local Ray instance on this machine."
    )
    num_nodes: int = Field(
        1, ge=1, description="Nodes the placement plan assumes (its GPUs are checked against the cluster at start)."
    )
    gpus_per_node: int = Field(0, ge=0, description="GPUs on each node; 0 plans a CPU-only run.")
    trainer_gpu_share: float = Field(
        0.5, gt=0, lt=1, description="Share of all GPUs given to trainer workers; the rest run rollout engines "
        "(RECIPE.md §1: 0.5)."
    )
    num_trainer_workers: int | None = Field(
        None, ge=1, description="Trainer processes (FSDP2 ranks); None: one per trainer GPU, or 1 without GPUs."
    )
    gpus_per_engine: int | None = Field(
        None, ge=1, description="GPUs per rollout engine; None: the engine's tensor-parallel size from engine.args "
        "(tp-size / tensor-parallel-size), else 1."
    )
    num_engines: int | None = Field(
        None, ge=1, description="CPU-only runs (gpus_per_node = 0) with engine servers: how many to launch; None: 1. "
        "With GPUs the count follows from the GPU split and gpus_per_engine."
    )
    num_rollout_workers: int = Field(
        1, ge=1, description="Rollout worker actors; each runs its share of max_inflight_attempts (fork sandbox → "
        "harness → grade) and holds (local engine) or calls (server engine) one engine."
    )
    num_cpus_per_rollout_worker: float = Field(
        1.0, gt=0,
        description="Ray CPUs reserved by each rollout worker (sandboxes, graders, a local engine's threads).",
    )
    num_cpus_per_trainer_worker: float = Field(1.0, gt=0, description="Ray CPUs reserved by each trainer worker.")
    num_cpus_per_engine: float = Field(
        1.0, gt=0, description="Ray CPUs reserved by each engine server's actor (engine.kind = 'sglang'; the server "
        "process runs inside its reservation)."
    )
    max_worker_restarts: int = Field(
        3, ge=0, description="Times Ray restarts a dead rollout worker or engine server; its in-flight attempts are "
        "retried (runtime.max_attempt_retries) or counted as lost."
    )
    engine_start_timeout_sec: float = Field(
        900.0, gt=0, description="Seconds a launched engine server may take to answer (model load, CUDA graphs), at "
        "start and after a restart; one that stays away longer is out for good."
    )
    worker_start_timeout_sec: float = Field(
        300.0, gt=0, description="Seconds to wait for a (re)started actor to answer before it counts as dead."
    )


class RuntimeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "ray"] = Field(
        "local", description="'local' (asyncio + threads, one machine) or 'ray' (actors; see [runtime.ray])."
    )
    mode: Literal["async", "sync"] = Field("async", description="'sync' exists only as the idle-time baseline.")
    steps: int = Field(10, ge=1, description="Optimizer steps to run.")
    group_size: int = Field(12, ge=2, description="Attempts per task in a GRPO group (RECIPE.md §5).")
    groups_per_step: int = Field(1, ge=1, description="Groups consumed by one optimizer step.")
    max_inflight_attempts: int = Field(16, ge=1, description="Attempts kept running at all times.")
    max_queued_groups: int | None = Field(
        None, ge=1,
        description="Groups that may be queued for the trainer or still sampling before workers open no new group; "
        "None = groups_per_step × rl.max_staleness (a group opened behind more would have its first turns masked "
        "as stale). Lower it to keep trained turns fresher when rollouts outpace the trainer.",
    )
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
        "(the local half-and-half split); None = half the cores. Each role sets its count inside its own thread. "
        "An explicit engine.num_threads takes precedence for the engine; the trainer always gets this value.",
    )
    seed: int = Field(0, description="Seed of task order and sampling.")
    ray: RayConfig = Field(default_factory=RayConfig, description="Ray backend: cluster and placement.")
    curation: CurationConfig = Field(
        default_factory=CurationConfig, description="Online curation: which task each new group draws (issue 29)."
    )

    @model_validator(mode="after")
    def _queue_holds_a_step(self) -> RuntimeConfig:
        if self.max_queued_groups is not None and self.max_queued_groups < self.groups_per_step:
            raise ValueError(
                f"runtime.max_queued_groups ({self.max_queued_groups}) < runtime.groups_per_step "
                f"({self.groups_per_step}): the trainer could never get a batch; allow at least one step's groups"
            )
        return self

    @model_validator(mode="after")
    def _ray_fits(self) -> RuntimeConfig:
        if self.backend == "ray" and self.ray.num_rollout_workers > self.max_inflight_attempts:
            raise ValueError(
                f"runtime.ray.num_rollout_workers ({self.ray.num_rollout_workers}) > runtime.max_inflight_attempts "
                f"({self.max_inflight_attempts}): a worker would have no attempt to run; lower the workers or raise "
                "the attempts in flight"
            )
        return self
