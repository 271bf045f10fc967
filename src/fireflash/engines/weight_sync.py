"""Weight sync from the trainer to rollout engines in other processes (RECIPE.md §1: new weights after every step).

    trainer rank 0 = group rank 0                         engine process = group rank r (1 .. world_size-1)
      GroupWeightSender.send(state, version)                GroupWeightReceiver.serve(engine)
        header: version + tensor specs per bucket ───────►    receive every bucket (engine keeps sampling)
        bucket 0 .. B-1: one flat tensor each   ───────►      engine.pause() → update_weights → resume()
      GroupWeightSender.close(): header version -1 ─────►     serve() returns

The group is *dedicated*: a second process group beside the trainer's own (FSDP) group, created by a
TCP rendezvous on ``master_address:master_port`` with the trainer as rank 0 and store host. Its
rendezvous is the one SGLang's ``/init_weights_update_group`` performs on the server side (a TCP store,
keys prefixed by the group name), so the same function makes the trainer's end of an SGLang weight-update
group: ``SGLangEngine(url, broadcast=tensor_broadcaster(group, device))`` then sends each tensor in order,
as SGLang's ``update_weights_from_distributed`` receives them. Backend: NCCL between GPUs, gloo on CPU (and
when trainer and engine share one GPU: NCCL refuses two ranks on one device; gloo moves CUDA tensors
through host memory).

FireFlash's own receivers (a ``LocalEngine`` or any ``Engine`` in another process, e.g. a Ray rollout worker)
get bucketed transfers: tensors of one dtype are concatenated into flat buckets of about ``bucket_bytes``
(the layout of SGLang's ``FlattenedTensorBucket``), so a 300-tensor model moves in a handful of collectives.
Each update is tagged with its weight version, and the engine installs it between decode steps: pause,
install, resume, so attempts in flight continue (``LocalEngine`` finishes rows already running on the old
weights, so every result still carries one version).

Engines that cannot join a group (a server without the endpoint, another cluster) use ``DiskWeightSync``:
save an HF directory, then ``engine.update_weights(path, version)`` (SGLang ``/update_weights_from_disk``).

Run: see tests/engines/test_weight_sync.py (a trainer process and an engine process over gloo).
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import math
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# TensorSpec and specs_of live in weights; TensorSpec stays importable from here
from fireflash.engines.weights import Broadcast, TensorSpec, specs_of
from fireflash.protocols import Engine

STOP_VERSION = -1  # header version that ends a receiver's serve loop


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


def plan_buckets(named: Sequence[tuple[str, torch.Tensor]], bucket_bytes: int) -> list[list[TensorSpec]]:
    """Split tensors, in order, into buckets of one dtype and at most ``bucket_bytes`` (a larger tensor goes alone).

    Raises:
        ValueError: bucket_bytes < 1.
    """
    if bucket_bytes < 1:
        raise ValueError(f"weight sync bucket_bytes={bucket_bytes} must be >= 1")
    buckets: list[list[TensorSpec]] = []
    size = 0
    for spec, (_, t) in zip(specs_of(named), named, strict=True):
        nbytes = t.numel() * t.element_size()
        if buckets and buckets[-1][0].dtype == spec.dtype and size + nbytes <= bucket_bytes:
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


class GroupWeightSender:
    """Trainer rank 0's end of a weight-update group with FireFlash receivers (``GroupWeightReceiver``).

    Args:
        group: from ``init_weight_update_group(..., rank=0, ...)``.
        bucket_bytes: target size of one flat transfer, bytes.
        device: where buckets are assembled ('cuda' for NCCL, 'cpu' for gloo).
        dtype: cast floating-point tensors to this dtype before sending (e.g. bf16 for a bf16 engine); None keeps them.
    """

    def __init__(
        self,
        group: dist.ProcessGroup,
        bucket_bytes: int = 256 << 20,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
    ) -> None:
        self.group, self.bucket_bytes, self.device, self.dtype = group, bucket_bytes, torch.device(device), dtype

    def send(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Broadcast ``weights`` tagged ``version`` (>= 0); blocks until every receiver has them.

        Raises:
            ValueError: a negative version (reserved for ``close``) or no weights.
        """
        if version < 0 or not weights:
            raise ValueError(f"weight sync: send needs a version >= 0 and weights (got version {version}, {len(weights)} tensors)")
        named = [(n, self._cast(t)) for n, t in weights.items()]
        buckets = plan_buckets(named, self.bucket_bytes)
        header: list[Any] = [{"version": version, "buckets": buckets}]
        dist.broadcast_object_list(header, src=0, group=self.group, device=self.device)
        tensors = dict(named)
        for bucket in buckets:
            flat = torch.cat([tensors[s.name].detach().reshape(-1) for s in bucket]).to(self.device)
            dist.broadcast(flat, src=0, group=self.group)

    async def update_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """``send`` off the event loop (the shape of ``Engine.update_weights`` for runtime code)."""
        await asyncio.to_thread(self.send, weights, version)

    def close(self) -> None:
        """Tell every receiver to stop serving (their ``serve`` returns)."""
        dist.broadcast_object_list([{"version": STOP_VERSION, "buckets": []}], src=0, group=self.group, device=self.device)

    def _cast(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.dtype) if self.dtype is not None and t.is_floating_point() else t


class GroupWeightReceiver:
    """An engine process's end of a weight-update group (rank >= 1).

    Args:
        group: from ``init_weight_update_group(..., rank=r, ...)``.
        device: where buckets land ('cuda' for NCCL); the engine copies them into its model.
    """

    def __init__(self, group: dist.ProcessGroup, device: torch.device | str = "cpu") -> None:
        self.group, self.device = group, torch.device(device)

    def receive(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        """Block for the next update: (version, state dict), or None when the sender closed."""
        header: list[Any] = [None]
        dist.broadcast_object_list(header, src=0, group=self.group, device=self.device)
        if header[0]["version"] == STOP_VERSION:
            return None
        state: dict[str, torch.Tensor] = {}
        for bucket in header[0]["buckets"]:
            dtype = getattr(torch, bucket[0].dtype)
            sizes = [math.prod(s.shape) for s in bucket]
            flat = torch.empty(sum(sizes), dtype=dtype, device=self.device)
            dist.broadcast(flat, src=0, group=self.group)
            for spec, part in zip(bucket, flat.split(sizes), strict=True):
                state[spec.name] = part.view(spec.shape)
        return header[0]["version"], state

    async def serve(self, engine: Engine, on_update: Callable[[int], Awaitable[None]] | None = None) -> int:
        """Install every update into ``engine`` between turns until the sender closes; returns how many.

        Receiving runs in a worker thread, so the engine keeps sampling meanwhile; each update is applied by
        ``apply_between_turns``. ``on_update(version)`` runs after each installation, before the next receive.
        """
        n = 0
        while (update := await asyncio.to_thread(self.receive)) is not None:
            version, state = update
            await apply_between_turns(engine, state, version)
            n += 1
            if on_update is not None:
                await on_update(version)
        return n


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

