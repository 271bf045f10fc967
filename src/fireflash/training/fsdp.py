"""The training recipe sharded over processes with PyTorch FSDP2, one process per device (RECIPE.md §1, §5).

    every rank:  groups of the step ──► pack_groups (same micro-batches everywhere)
                 its share: micro[rank::world_size] ──► forward/backward (Trainer's loss loop)
                 FSDP2 reduce-scatters the gradients (summed, not averaged) ──► clip ──► AdamW on its shard
    rank 0:      gathered full state dict ──► HF checkpoint / weight sync to the rollout engines

Why the loss loop is shared, not copied: ``FSDPTrainer`` subclasses ``Trainer`` and only changes which
micro-batches a rank runs and how one micro-batch reaches the model (the objective goes through an
FSDP2-registered forward method so the root's parameters are all-gathered). Because per-attempt loss floors
and the step's token count are step-wide (``rl.loss``), the ranks' losses add up to the single-process step
loss; gradients are therefore *summed* across ranks (FSDP2 averages by default).

Precision: the sharded parameters (the AdamW master copy) stay fp32. On CUDA with ``training.dtype`` bf16
(or 'auto'), FSDP2's ``MixedPrecisionPolicy`` all-gathers bf16 parameters for compute and reduces gradients
in fp32. On CPU everything is fp32 over gloo.

Launch, three ways (each rank calls the same code on the same groups):

    # tests / one machine: spawn processes, each joins the gloo or NCCL group
    spawn_ranks(worker_fn, world_size=2, args=(...,), timeout_sec=60)     # worker_fn(rank, world_size, port, ...)
    # torchrun: torchrun --nproc-per-node 8 my_script.py   (inside: device = init_trainer_group_from_env())
    # Ray actors (runtime/ray_backend.py): per rank
    trainer = build_fsdp_trainer(model_dir, cfg, objective, temperature, rank=r, world_size=n,
                                 master_addr=addr, master_port=port)
    metrics = trainer.train_step(groups)        # every rank, same groups
    weights = trainer.state_dict()              # every rank (collective); full on rank 0, {} elsewhere
    if rank == 0: broadcast(list(weights.items()))   # engines.weight_sync.tensor_broadcaster; servers receive

Simplifications (named): every rank receives the whole step's groups and packs them itself (groups are small
next to activations); a rank with one micro-batch fewer than another runs a zero-weighted pass so all ranks
join the same collectives; the full state dict is gathered to rank 0's CPU before it is sent (for models that
do not fit one host's memory, stream per parameter instead).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fireflash.protocols import Group
from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.metrics import finish_micro_batch_metrics
from fireflash.training.batch import MicroBatch, pack_groups, to_device
from fireflash.training.checkpoint import (
    SCHEMA_VERSION,
    commit_checkpoint,
    is_sharded,
    latest_checkpoint,
    load_checkpoint_state,
    load_sharded_state,
    save_checkpoint,
    stage_checkpoint,
    staging_dir,
)
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer, micro_batch_loss

_LOSS_METHOD = "fireflash_micro_batch_loss"  # the FSDP2-registered forward method on the policy
_LEFT_KEY = "fireflash/ranks_left"
_STORE: dist.TCPStore | None = None  # this process's rendezvous store while it is in the trainer group


# ───────────────────────────────────── process groups ─────────────────────────────────────


def init_trainer_group(
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    local_rank: int | None = None,
    timeout_sec: float = 600.0,
) -> torch.device:
    """Join the trainer ranks' default process group; returns this rank's device.

    CUDA available: NCCL for GPU tensors (gloo for CPU objects), device ``cuda:local_rank``. Otherwise gloo
    on CPU. A collective that waits longer than ``timeout_sec`` raises instead of hanging.

    Raises:
        ValueError: rank outside [0, world_size).
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} must lie in [0, world_size={world_size})")
    global _STORE
    timeout = datetime.timedelta(seconds=timeout_sec)
    # An explicit store (rank 0 hosts it) so leave_trainer_group can keep it up until every rank has left.
    _STORE = dist.TCPStore(master_addr, master_port, world_size, is_master=rank == 0, timeout=timeout)
    if torch.cuda.is_available():
        device = torch.device("cuda", rank if local_rank is None else local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(
            "cpu:gloo,cuda:nccl", store=_STORE, rank=rank, world_size=world_size, timeout=timeout, device_id=device,
        )
        return device
    dist.init_process_group("gloo", store=_STORE, rank=rank, world_size=world_size, timeout=timeout)
    return torch.device("cpu")


def leave_trainer_group(timeout_sec: float = 60.0) -> None:
    """Leave the default process group cleanly: wait for every rank, destroy it, and on rank 0 keep the
    rendezvous store up until every rank has finished destroying its group.

    Why: a rank that tears its group down while a peer still works can take the rendezvous store (hosted by
    rank 0) away from that peer, which then aborts in native code ("terminate called without an active
    exception") instead of raising. Call it on every rank, after the last collective and the last write that
    others rely on. A peer that never reports back delays rank 0 by at most ``timeout_sec`` seconds.
    """
    global _STORE
    if not dist.is_initialized():
        return
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.barrier()
    dist.destroy_process_group()
    store, _STORE = _STORE, None
    if store is None:  # joined by someone else's init_process_group: nothing of ours to keep up
        return
    store.add(_LEFT_KEY, 1)
    deadline = time.monotonic() + timeout_sec
    while rank == 0 and store.add(_LEFT_KEY, 0) < world_size and time.monotonic() < deadline:
        time.sleep(0.01)


def init_trainer_group_from_env(timeout_sec: float = 600.0) -> torch.device:
    """``init_trainer_group`` from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT).

    Raises:
        KeyError: not started by torchrun (or those variables unset), naming the missing variable.
    """
    env = os.environ
    return init_trainer_group(
        int(env["RANK"]), int(env["WORLD_SIZE"]), env["MASTER_ADDR"], int(env["MASTER_PORT"]),
        local_rank=int(env.get("LOCAL_RANK", 0)), timeout_sec=timeout_sec,
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a rendezvous on one machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, fn: Callable[..., None], world_size: int, port: int, args: tuple) -> None:
    fn(rank, world_size, port, *args)


def spawn_ranks(fn: Callable[..., None], world_size: int, args: tuple = (), timeout_sec: float = 120.0) -> None:
    """Run ``fn(rank, world_size, master_port, *args)`` in ``world_size`` fresh processes and wait.

    ``fn`` must be importable (a module-level function); each process usually calls ``init_trainer_group``
    with 127.0.0.1 and ``master_port``. Uses torch.multiprocessing with the 'spawn' start method.

    Raises:
        torch.multiprocessing.ProcessRaisedException: a rank raised (the others are terminated).
        TimeoutError: not all ranks finished within ``timeout_sec`` (all are killed).
    """
    context = mp.start_processes(
        _rank_main, args=(fn, world_size, free_port(), args), nprocs=world_size, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout_sec
    while not context.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            raise TimeoutError(
                f"spawn_ranks: {world_size} ranks of {getattr(fn, '__name__', fn)} still running after "
                f"{timeout_sec:.0f} s (a hang in a collective?); killed"
            )


# ───────────────────────────────────── sharding ─────────────────────────────────────


def shard_policy(model: torch.nn.Module, param_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Apply FSDP2 to a causal LM in place: one unit per decoder layer, the rest (embeddings, norm, head) in the root.

    Gradients are summed over ranks (each rank's loss is its part of the step loss). The objective's entry
    point is registered as an FSDP2 forward method, so ``model.fireflash_micro_batch_loss(mb, version,
    temperature, objective)`` all-gathers the root's parameters like ``model(...)`` would.

    Args:
        model: a causal LM on this rank's device (``model.model.layers`` are sharded one by one when present).
        param_dtype: compute dtype of the all-gathered parameters (bf16 on GPU); gradients reduce in fp32.
            None keeps the parameters' own dtype.

    Raises:
        RuntimeError: no default process group (call ``init_trainer_group`` first).
    """
    from torch.distributed.fsdp import (
        FSDPModule,
        MixedPrecisionPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    if not dist.is_initialized():
        raise RuntimeError("shard_policy needs the trainer process group: call init_trainer_group(...) first")
    reduce_dtype = torch.float32 if param_dtype is not None else None
    for layer in getattr(getattr(model, "model", None), "layers", []):
        fully_shard(layer, mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype))
    # the root's inputs are the rollout record (log-probs must stay fp32), so they are not cast
    fully_shard(
        model,
        mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=False),
    )
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            # plain SUM: gloo has no AVG / PREMUL_SUM, and 1.0 means no division at all
            module.set_force_sum_reduction_for_comms(True)
    setattr(model, _LOSS_METHOD, functools.partial(micro_batch_loss, model))
    register_fsdp_forward_method(model, _LOSS_METHOD)
    return model


# ───────────────────────────────────── the trainer ─────────────────────────────────────


class FSDPTrainer(Trainer):
    """``Trainer`` whose policy is sharded over the default process group with FSDP2.

    Every public method is collective: all ranks call it, with the same arguments, in the same order.

    Args:
        model: the policy (fp32), on CPU or this rank's device; it is moved to ``device`` and sharded.
        tokenizer / cfg / objective / temperature / weight_version: see ``Trainer``.
        device: this rank's device (``init_trainer_group``'s result).
        sharded_checkpoints: save with torch.distributed.checkpoint (every rank writes its shards) instead
            of gathering an HF directory on rank 0; for models whose full state does not fit one host.

    Raises:
        RuntimeError: no default process group.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        cfg: TrainerConfig,
        objective: ObjectiveConfig,
        temperature: float,
        weight_version: int = 0,
        *,
        device: torch.device,
        sharded_checkpoints: bool = False,
    ) -> None:
        if not dist.is_initialized():
            raise RuntimeError("FSDPTrainer needs the trainer process group: call init_trainer_group(...) first")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device, self.sharded_checkpoints = device, sharded_checkpoints
        gpu_bf16 = device.type == "cuda" and cfg.dtype in ("auto", "bfloat16")
        param_dtype = torch.bfloat16 if gpu_bf16 or cfg.dtype == "bfloat16" else None
        shard_policy(model.to(device=device, dtype=torch.float32), param_dtype)
        super().__init__(model, tokenizer, cfg, objective, temperature, weight_version)
        self.device, self.compute_dtype = device, None  # FSDP2's MixedPrecisionPolicy casts, not autocast

    def accumulate_gradients(self, groups: Sequence[Group]) -> dict[str, float]:
        """This rank's share of the step's micro-batches, forward/backward; metrics summed over ranks.

        Returns the same keys and values as ``Trainer.accumulate_gradients`` on one process.
        """
        micro = [mb for mb in self.pack(groups) if mb.policy.target_ids.numel()]
        self.model.train()
        n_tokens = sum(mb.policy.target_ids.numel() for mb in micro)
        mine = micro[self.rank :: self.world_size]
        totals = self.backward_micro_batches(mine, n_tokens)
        for _ in range(math.ceil(len(micro) / self.world_size) - len(mine)):
            # join the all-gathers / reduce-scatters of the ranks that have one micro-batch more
            loss, _ = self.micro_batch_loss(micro[0])
            (loss * 0.0).backward()
        self.model.eval()
        totals = finish_micro_batch_metrics(_sum_over_ranks(totals))
        return totals | {"tokens/n": float(n_tokens), "micro_batches": float(len(micro))}

    def count_fresh_tokens(self, groups: Sequence[Group]) -> tuple[int, int]:
        """``Trainer.count_fresh_tokens``, the largest count over ranks: every rank skips an all-stale step or
        none does (a rank that stepped alone would wait forever in the others' collectives). Collective."""
        counts = torch.tensor(super().count_fresh_tokens(groups), dtype=torch.int64, device=self.device)
        dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        sampled, fresh = counts.tolist()
        return sampled, fresh

    def pack(self, groups: Sequence[Group]) -> list[MicroBatch]:
        """``pack_groups`` without shared prefixes: FSDP2 reshards a layer after each forward, and one backward
        through two forward passes of the same layers (prefix, then suffixes) finds its parameters freed."""
        return pack_groups(groups, self.cfg.micro_batch_tokens, self.objective.score_centering_topk, self.pad_id, False)

    def micro_batch_loss(self, mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """The objective on one micro-batch, through the FSDP2-registered forward method."""
        return getattr(self.model, _LOSS_METHOD)(
            to_device(mb, self.device), self.weight_version, self.temperature, self.objective
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Full (unsharded) CPU weights on rank 0, ``{}`` on the other ranks. Collective."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def save_checkpoint(self, root: Path, cursor: dict[str, Any]) -> Path:
        """Checkpoint ``root/step-NNNNNN`` (layout of ``training.checkpoint``). Collective.

        Default: the full weights and optimizer state are gathered to rank 0, which writes the same
        HF-loadable directory as the single-process trainer (its ``trainer_state.pt`` holds the optimizer
        state keyed by parameter name, resumable by ``FSDPTrainer`` at any world size). With
        ``sharded_checkpoints``: every rank writes its shards under ``dcp/`` (torch.distributed.checkpoint)
        beside config.json and the tokenizer; resume at the same or another world size with ``restore``.
        """
        if self.sharded_checkpoints:
            return self._save_sharded(Path(root), cursor)
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_state = get_model_state_dict(self.model, options=full)
        optimizer_state = get_optimizer_state_dict(self.model, self.optimizer, options=full)
        path = Path(root) / f"step-{self.step:06d}"
        if self.rank == 0:
            save_checkpoint(
                Path(root), self.step, self.model, self.tokenizer, self.optimizer, self.weight_version, cursor,
                self.cfg.keep_checkpoints, model_state=model_state, optimizer_state=optimizer_state,
            )
        dist.barrier()
        return path

    def restore(self, root: Path) -> dict[str, Any]:
        """Restore optimizer, step and version from the latest checkpoint under ``root``. Collective.

        A gathered checkpoint: the model must already hold its weights (build the trainer from that directory);
        a sharded one: weights and optimizer are loaded here. Returns the saved data cursor.

        Raises:
            fireflash.training.checkpoint.CheckpointError: nothing to resume from, or a newer schema.
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        path = latest_checkpoint(Path(root))
        if is_sharded(path):
            return self._restore_sharded(path)

        def scatter(state: dict[str, Any]) -> None:
            set_optimizer_state_dict(
                self.model, self.optimizer, state, options=StateDictOptions(full_state_dict=True)
            )

        meta = load_checkpoint_state(path, self.optimizer, scatter)
        self.step, self.weight_version = meta["step"], meta["weight_version"]
        return meta["cursor"]

    def _save_sharded(self, root: Path, cursor: dict[str, Any]) -> Path:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        if self.rank == 0:
            stage_checkpoint(root, self.step)
        dist.barrier()
        staged = staging_dir(root, self.step)
        state = {
            "model": get_model_state_dict(self.model),
            "optimizer": get_optimizer_state_dict(self.model, self.optimizer),
        }
        dcp.save(state, checkpoint_id=str(staged / "dcp"))  # returns on rank 0 once every rank's shards are written
        if self.rank == 0:
            self.model.config.save_pretrained(staged)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(staged)
            meta = {
                "schema_version": SCHEMA_VERSION, "step": self.step, "weight_version": self.weight_version,
                "cursor": cursor, "sharded": True,
            }
            (staged / "fireflash.json").write_text(json.dumps(meta, indent=1))
            commit_checkpoint(root, self.step, self.cfg.keep_checkpoints)
        dist.barrier()
        return root / f"step-{self.step:06d}"

    def _restore_sharded(self, path: Path) -> dict[str, Any]:
        meta = load_sharded_state(path, self.model, self.optimizer)
        self.step, self.weight_version = meta["step"], meta["weight_version"]
        return meta["cursor"]


def _sum_over_ranks(totals: dict[str, float]) -> dict[str, float]:
    """Sum each metric over ranks (a rank may lack a key, e.g. an empty staleness bucket)."""
    gathered: list[dict[str, float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, totals)
    out: dict[str, float] = {}
    for part in gathered:
        for key, value in (part or {}).items():
            out[key] = out.get(key, 0.0) + value
    return out


def build_fsdp_trainer(
    model_path: str,
    cfg: TrainerConfig,
    objective: ObjectiveConfig,
    temperature: float,
    *,
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    local_rank: int | None = None,
    tokenizer: Any = None,
    sharded_checkpoints: bool = False,
    timeout_sec: float = 600.0,
) -> FSDPTrainer:
    """One rank's trainer, for a Ray actor or any per-rank launcher: join the group, load, shard.

    Args:
        model_path: a local HF model directory (or the embedded name), the same on every rank.
        cfg / objective / temperature: see ``Trainer``.
        rank / world_size / master_addr / master_port / local_rank: the trainer group (rank 0 hosts it).
        tokenizer: saved into checkpoints (rank 0 needs it; others may pass None).
        sharded_checkpoints / timeout_sec: see ``FSDPTrainer`` / ``init_trainer_group``.

    Raises:
        fireflash.models.ModelNotFound: ``model_path`` does not resolve.
    """
    from fireflash.models import load_policy

    device = init_trainer_group(rank, world_size, master_addr, master_port, local_rank, timeout_sec)
    return FSDPTrainer(
        load_policy(model_path, dtype="float32"), tokenizer, cfg, objective, temperature,
        device=device, sharded_checkpoints=sharded_checkpoints,
    )
