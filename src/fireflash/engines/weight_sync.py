"""Weight sync from the trainer to rollout engines in other processes (RECIPE.md §1: new weights after every step).

    trainer rank 0 = group rank 0                         engine server = group rank r (1 .. world_size-1)
      init_weight_update_group(..., rank=0)    ◄──────►   /init_weights_update_group (SGLangEngine.init_weight_sync)
      tensor_broadcaster(group)(named)                    /update_weights_from_distributed, one call per bucket
        each tensor, in order, from rank 0      ───────►    (plan_buckets): receive exactly the listed tensors

The group is *dedicated*: a second process group beside the trainer's own (FSDP) group, created by a
TCP rendezvous on ``master_address:master_port`` with the trainer as rank 0 and store host. Its
rendezvous is the one SGLang's ``/init_weights_update_group`` performs on the server side (a TCP store,
keys prefixed by the group name), so the same function makes the trainer's end of an SGLang weight-update
group: ``SGLangEngine(url, broadcast=tensor_broadcaster(group, device))`` then sends each tensor in order,
as SGLang's ``update_weights_from_distributed`` receives them, in calls of at most ``bucket_bytes``
(``plan_buckets``). FireFlash's own server (``engines/serve.py``) speaks the same API, so one path serves both.
Backend: NCCL between GPUs, gloo on CPU (and when trainer and engine share one GPU: NCCL refuses two ranks on one
device; gloo moves CUDA tensors through host memory).

In-process engines take new weights between decode steps (``apply_between_turns``: pause, install, resume), so
attempts in flight continue (``LocalEngine`` finishes rows already running on the old weights, so every result
still carries one version). Engines that cannot join a group (a server without the endpoint, another cluster)
use ``DiskWeightSync``: save an HF directory, then ``engine.update_weights(path, version)`` (SGLang
``/update_weights_from_disk``).

Run: see tests/engines/test_weight_sync.py (a trainer process and a server process over gloo).
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# TensorSpec lives in weights; it stays importable from here
from fireflash.engines.weights import Broadcast, TensorSpec
from fireflash.protocols import Engine


def init_weight_update_group(
    master_address: str,
    master_port: int,
    rank: int,
    world_size: int,
    backend: str = "gloo",
    group_name: str = "weight_update_group",
    timeout_sec: float = 300.0,
) -> dist.ProcessGroup:
    """Join (rank 0: create) a weight-update process group separate from the default one.

    Works with or without a default process group. Rank 0 (the trainer) hosts the TCP store on
    ``master_address:master_port``; every member calls this with the same address, port, world size and
    group name; the call returns once all ``world_size`` members have joined.

    Args:
        backend: 'nccl' (GPU tensors, one GPU per member) or 'gloo' (CPU; CUDA tensors via host memory).
        group_name: must match the engine side (SGLang's ``group_name``).
        timeout_sec: a member that does not join, or a collective that stalls, fails after this long.

    Raises:
        ValueError: rank outside [0, world_size) or an unknown backend.
    """
    from torch.distributed.distributed_c10d import (
        Backend,
        PrefixStore,
        _new_process_group_helper,
        _world,
        rendezvous,
    )

    if not 0 <= rank < world_size:
        raise ValueError(f"weight sync rank {rank} must lie in [0, world_size={world_size})")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"weight sync backend {backend!r}: use 'nccl' (GPUs) or 'gloo' (CPU, or one shared GPU)")
    timeout = datetime.timedelta(seconds=timeout_sec)
    # torch has no public API for a second group outside the default world; this is the construction SGLang's
    # server performs (and we must match for it to meet us), as OpenRLHF does: rendezvous → PrefixStore → helper
    store, rank, world_size = next(rendezvous(f"tcp://{master_address}:{master_port}", rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    store = PrefixStore(group_name, store)
    options = "backend_options" if "backend_options" in inspect.signature(_new_process_group_helper).parameters else "pg_options"
    group, _ = _new_process_group_helper(
        world_size, rank, [], Backend(backend), store, group_name=group_name, timeout=timeout, **{options: None}
    )
    _world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group


def plan_buckets(specs: Sequence[TensorSpec], bucket_bytes: int) -> list[list[TensorSpec]]:
    """Split tensor specs, in order, into buckets of at most ``bucket_bytes`` bytes (a larger tensor goes alone):
    one ``/update_weights_from_distributed`` call each, so a server allocates at most one bucket beside its model.

    Raises:
        ValueError: bucket_bytes < 1, or a dtype torch does not know.
    """
    if bucket_bytes < 1:
        raise ValueError(f"weight sync bucket_bytes={bucket_bytes} must be >= 1 (engine.weight_sync_bucket_mb)")
    buckets: list[list[TensorSpec]] = []
    size = 0
    for spec in specs:
        dtype = getattr(torch, spec.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(  # noqa: TRY004 - a wrong value (a name), not a wrong type
                f"weight sync: tensor {spec.name!r} has dtype {spec.dtype!r}, not a torch dtype")
        nbytes = math.prod(spec.shape) * dtype.itemsize
        if buckets and size + nbytes <= bucket_bytes:
            buckets[-1].append(spec)
            size += nbytes
        else:
            buckets.append([spec])
            size = nbytes
    return buckets


def tensor_broadcaster(group: dist.ProcessGroup, device: torch.device | str = "cpu") -> Broadcast:
    """The trainer's ``Broadcast`` for ``SGLangEngine``: each tensor, in order, from rank 0.

    Matches SGLang's ``update_weights_from_distributed`` receiver (one broadcast per named tensor, in the
    order of the names posted over HTTP). ``device``: where tensors go before sending ('cuda' for NCCL).
    vLLM's weight-transfer engine builds its own NCCL communicator instead; its trainer side comes from vLLM.
    """
    device = torch.device(device)

    def broadcast(named: list[tuple[str, torch.Tensor]]) -> None:
        pending = []  # (tensor, work): a moved copy must outlive its asynchronous send
        for _, t in named:
            t = t.detach().to(device).contiguous()
            pending.append((t, dist.broadcast(t, src=0, group=group, async_op=True)))
        for _, work in pending:
            work.wait()

    return broadcast


async def apply_between_turns(engine: Engine, weights: Mapping[str, torch.Tensor] | Path, version: int) -> None:
    """pause → ``update_weights(weights, version)`` → resume (resumed even if the update fails).

    In-flight requests are not aborted: a paused ``LocalEngine`` keeps their KV cache and finishes them on the
    weights they started with.
    """
    await engine.pause()
    try:
        await engine.update_weights(weights, version)
    finally:
        await engine.resume()


class DiskWeightSync:
    """Fallback for engines that cannot join a group: an HF directory per version, then ``update_weights(dir)``.

    Args:
        root: where ``weights-vNNNNNN`` directories go (shared storage when engines run elsewhere).
        model: the trainer's model (its ``save_pretrained`` writes config + safetensors; with a gathered state dict
            for a sharded trainer).
        tokenizer: saved beside the weights when given (servers that reload the tokenizer need it).
        keep: directories kept; older ones are deleted after every engine has moved on.
    """

    def __init__(self, root: Path, model: torch.nn.Module, tokenizer: Any = None, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"DiskWeightSync keep={keep} must be >= 1")
        self.root, self.model, self.tokenizer, self.keep = Path(root), model, tokenizer, keep

    def save(self, weights: Mapping[str, torch.Tensor], version: int) -> Path:
        """Write ``root/weights-v{version:06d}`` (atomically: a hidden sibling renamed into place)."""
        final, tmp = self.root / f"weights-v{version:06d}", self.root / f".weights-v{version:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp, safe_serialization=True, state_dict=dict(weights))
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return final

    async def publish(self, engines: Sequence[Engine], weights: Mapping[str, torch.Tensor], version: int) -> Path:
        """Save, then install in every engine between turns; prune old directories. Returns the new directory."""
        path = await asyncio.to_thread(self.save, weights, version)
        for engine in engines:
            await apply_between_turns(engine, path, version)
        for old in sorted(self.root.glob("weights-v*"))[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return path

