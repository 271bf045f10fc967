"""Where a Ray run puts its roles: trainer workers and rollout engines split the GPUs, CPUs run the rest.

RECIPE.md §1: training and sampling run on separate resources (reference: half the GPUs train, half run
the inference engine). GPUs are numbered node by node; trainer workers take the first
``trainer_gpu_share`` of them, engines the rest, so each role packs onto as few nodes as possible. Rollout
workers (sandboxes, harness, graders: CPU work) are spread over every node. Pure arithmetic on the
config: ``fireflash train --dry-run`` prints it without importing Ray or starting anything.

    placement = plan_placement(cfg.runtime.ray, cfg.engine, cfg.runtime.max_inflight_attempts)
    print("\\n".join(placement.describe()))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fireflash.engines.config import EngineConfig
from fireflash.runtime.config import RayConfig

# engine flags that give the tensor-parallel size, as SGLang and vLLM spell them
_TP_FLAGS = ("tp-size", "tp_size", "tp", "tensor-parallel-size", "tensor_parallel_size")


class PlacementError(ValueError):
    """The requested split does not fit the cluster; the message names the fields and the fix."""


@dataclass(frozen=True)
class Placement:
    """A Ray run's layout. GPU counts are whole GPUs; node ranges are inclusive, numbered from 0."""

    num_nodes: int
    gpus_per_node: int
    trainer_workers: int
    gpus_per_trainer_worker: int
    cpus_per_trainer_worker: float
    engine_kind: str
    engines: int  # rollout engines (servers, or one per rollout worker for in-process engines)
    gpus_per_engine: int
    engines_in_workers: bool  # True: each rollout worker holds its own in-process engine
    rollout_workers: int
    cpus_per_rollout_worker: float
    attempts_per_worker: int
    cpus_per_engine: float = 1.0  # Ray CPUs reserved by each engine server's actor
    weight_sync: str = "collective"  # engine servers: 'collective' or 'disk'

    @property
    def trainer_gpus(self) -> int:
        return self.trainer_workers * self.gpus_per_trainer_worker

    @property
    def engine_gpus(self) -> int:
        return self.engines * self.gpus_per_engine

    def _nodes(self, first_gpu: int, gpus: int) -> str:
        if not gpus:
            return "any node"
        lo, hi = first_gpu // self.gpus_per_node, (first_gpu + gpus - 1) // self.gpus_per_node
        return f"node {lo}" if lo == hi else f"nodes {lo}–{hi}"

    def describe(self) -> list[str]:
        """Human-readable lines, one per role (what ``--dry-run`` prints)."""
        total = self.num_nodes * self.gpus_per_node
        group = "vLLM's weight-transfer group" if self.engine_kind == "vllm" else "a weight-update group"
        gpu = lambda n: f"{n} GPU" + ("s" if n != 1 else "")  # noqa: E731
        engine_where = (
            "inside each rollout worker" if self.engines_in_workers
            else f"servers, each in its own actor with {self.cpus_per_engine:g} CPU"
        )
        lines = [
            f"cluster: {self.num_nodes} node(s) × {gpu(self.gpus_per_node)} = {gpu(total)}"
            + (f"; trainer {self.trainer_gpus} / engines {self.engine_gpus}" if total else " (CPU only)"),
            f"trainer: {self.trainer_workers} worker(s) × {gpu(self.gpus_per_trainer_worker)}, "
            f"{self.cpus_per_trainer_worker:g} CPU each ({'FSDP2 ranks, ' if self.trainer_workers > 1 else ''}"
            f"{self._nodes(0, self.trainer_gpus)}, packed)",
            f"rollout engines: {self.engines} × {self.engine_kind} × {gpu(self.gpus_per_engine)} ({engine_where}; "
            f"{self._nodes(self.trainer_gpus, self.engine_gpus)})",
            f"rollout workers: {self.rollout_workers} × {self.cpus_per_rollout_worker:g} CPU, up to "
            f"{self.attempts_per_worker} attempts each; sandboxes and graders are CPU work inside them "
            "(any node, spread)",
            "weights: trainer rank 0 → object store → every rollout worker's engine, version + 1 after each step"
            if self.engines_in_workers else
            "weights: trainer rank 0 → every engine server, version + 1 after each step, "
            + (f"by one broadcast through {group} "
               f"({'NCCL' if self.gpus_per_engine else 'gloo'}, {self.gpus_per_engine or 1} rank(s) per server)"
               if self.weight_sync == "collective" else "by an HF directory each server loads (run_dir/weights)"),
        ]
        return lines


def _check_vllm(engine: EngineConfig, gpus: int) -> None:
    """vLLM servers on Ray (issue 31): launchable, and their weight-transfer backend is the one the trainer's end uses
    (NCCL on GPUs; FireFlash's gloo stand-in of it on a CPU cluster, whose servers are started elsewhere).

    Raises:
        PlacementError: the message names the field and the fix.
    """
    from fireflash.engines.config import weight_transfer_backend
    from fireflash.runtime.servers import check_launchable

    if not engine.url:
        try:
            check_launchable(engine)
        except ValueError as e:
            raise PlacementError(str(e)) from None
    if not gpus and not engine.url:
        raise PlacementError(
            "engine.kind = 'vllm' on a cluster without GPUs (runtime.ray.gpus_per_node = 0): vLLM's weight transfer is "
            "NCCL; give the cluster's GPUs, or use engine.kind = 'sglang' with engine.server = 'fireflash' on CPU nodes"
        )
    if engine.weight_sync != "collective":
        raise PlacementError("engine.kind = 'vllm' takes new weights only through its weight-transfer group: use "
                             "engine.weight_sync = 'collective'")
    backend, want = weight_transfer_backend(engine.args), "nccl" if gpus else "gloo"
    if backend != want:
        raise PlacementError(
            f"engine.args.weight_transfer_config.backend = {backend!r} on a cluster with {gpus} GPUs: the trainer "
            f"sends over {want!r} there; set engine.args.weight_transfer_config = {{backend = '{want}'}}"
        )


def engine_tp_size(engine: EngineConfig) -> int:
    """The tensor-parallel size the engine's own flags ask for (1 when none is given)."""
    for flag in _TP_FLAGS:
        if flag in engine.args:
            return int(engine.args[flag])
    return 1


def plan_placement(ray: RayConfig, engine: EngineConfig, max_inflight_attempts: int) -> Placement:
    """Split the cluster of ``ray`` between trainer workers, rollout engines and rollout workers.

    Args:
        ray: the ``runtime.ray`` section.
        engine: the ``engine`` section ('local' / 'scripted' engines live inside rollout workers;
            'sglang' / 'vllm' are servers on their own GPUs).
        max_inflight_attempts: attempts kept running, shared by the rollout workers.

    Raises:
        PlacementError: a role gets no GPU, GPUs do not divide evenly, or more trainer workers than
            trainer GPUs; the message names the ``runtime.ray`` fields to change.
    """
    total = ray.num_nodes * ray.gpus_per_node
    in_workers = engine.kind in ("local", "scripted")
    if engine.kind == "vllm":
        _check_vllm(engine, gpus=total)
    workers = ray.num_rollout_workers
    common = dict(
        num_nodes=ray.num_nodes, gpus_per_node=ray.gpus_per_node,
        cpus_per_trainer_worker=ray.num_cpus_per_trainer_worker,
        engine_kind=engine.kind, engines_in_workers=in_workers, rollout_workers=workers,
        cpus_per_rollout_worker=ray.num_cpus_per_rollout_worker,
        attempts_per_worker=math.ceil(max_inflight_attempts / workers),
        cpus_per_engine=ray.num_cpus_per_engine, weight_sync=engine.weight_sync,
    )
    if total == 0:
        return Placement(
            trainer_workers=ray.num_trainer_workers or 1, gpus_per_trainer_worker=0,
            engines=workers if in_workers else ray.num_engines or 1, gpus_per_engine=0, **common,
        )
    trainer_gpus = round(total * ray.trainer_gpu_share)
    engine_gpus = total - trainer_gpus
    if trainer_gpus < 1 or engine_gpus < 1:
        raise PlacementError(
            f"runtime.ray.trainer_gpu_share = {ray.trainer_gpu_share} of {total} GPUs leaves the "
            f"{'trainer' if trainer_gpus < 1 else 'rollout engines'} no GPU; use a share between {1 / total:.3g} "
            f"and {1 - 1 / total:.3g} (reference: 0.5)"
        )
    trainer_workers = ray.num_trainer_workers or trainer_gpus
    if trainer_gpus % trainer_workers:
        raise PlacementError(
            f"runtime.ray.num_trainer_workers = {trainer_workers} does not divide the {trainer_gpus} trainer GPUs; "
            f"use a divisor of {trainer_gpus} (or leave it unset for one worker per GPU)"
        )
    if in_workers:
        if engine_gpus % workers:
            raise PlacementError(
                f"engine.kind = {engine.kind!r} runs one engine inside each of runtime.ray.num_rollout_workers = "
                f"{workers} workers, which does not divide the {engine_gpus} engine GPUs; use a divisor of "
                f"{engine_gpus}"
            )
        engines, per_engine = workers, engine_gpus // workers
    else:
        per_engine = ray.gpus_per_engine or engine_tp_size(engine)
        if engine_gpus % per_engine:
            raise PlacementError(
                f"{engine_gpus} engine GPUs do not split into engines of {per_engine} GPUs "
                "(runtime.ray.gpus_per_engine or the engine's tp-size); change runtime.ray.trainer_gpu_share "
                "or the engine size"
            )
        engines = engine_gpus // per_engine
    return Placement(
        trainer_workers=trainer_workers, gpus_per_trainer_worker=trainer_gpus // trainer_workers,
        engines=engines, gpus_per_engine=per_engine, **common,
    )
