"""The trainer's end of vLLM's native weight transfer (issue 31; RECIPE.md §1: new weights after every step).

vLLM's server joins a weight-transfer group through ``/init_weight_transfer_engine`` and receives tensors during
``/update_weights``; its trainer side is not torch's default world but vLLM's own *stateless* group, so SGLang's
``init_weight_update_group`` cannot meet it. Read against vLLM 0.33 (main as of 2026-11,
``vllm/distributed/weight_transfer/nccl_engine.py``):

    trainer (rank 0)                                          vLLM worker r (rank r + rank_offset)
      NCCLWeightTransferEngine.trainer_init(                    init_transfer_engine(init_info)
        {master_address, master_port, world_size})                StatelessProcessGroup.create(host, port, rank, world)
        = StatelessProcessGroup (a TCPStore, rank 0 its            → PyNcclCommunicator
          master) → PyNcclCommunicator
      trainer_send_weights(iter(named), {group, packed})  ──►  receive_weights(update_info): per name, in order,
        one broadcast(src=0) per tensor (packed: buffers of       torch.empty(shape, dtype) ← broadcast, then
        packed_buffer_size_bytes, 1 GiB, double-buffered)          load_weights([(name, tensor)])

``VLLMTrainerTransfer`` is that trainer side. ``backend='nccl'`` (GPUs, a vLLM server started with
``--weight-transfer-config '{"backend": "nccl"}'``) calls vLLM's own ``trainer_init`` / ``trainer_send_weights``,
so vLLM must be importable in the trainer's process (``pip install 'fireflash[gpu]'``). ``backend='gloo'`` is
FireFlash's CPU stand-in for the same protocol (vLLM has no gloo backend): the same TCPStore rendezvous with the
trainer as master, a gloo group built on it without touching torch's default world (``stateless_gloo_group``), and
one broadcast per tensor in the order of ``update_info.names``; ``engines/vllm_serve.py`` is its receiving end.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

BACKENDS = ("nccl", "gloo")


def stateless_gloo_group(
    master_address: str, master_port: int, rank: int, world_size: int, timeout_sec: float = 300.0
) -> dist.ProcessGroup:
    """A gloo group of ``world_size`` members outside torch's default world (vLLM's ``StatelessProcessGroup``
    rendezvous: a TCPStore on ``master_address:master_port`` whose master is rank 0, ``vllm/distributed/utils.py``).

    Nothing is registered by name, so a trainer and a stand-in server can both be members inside one process.
    Returns once every member has connected (rank 0 waits for them).

    Raises:
        ValueError: ``rank`` outside [0, world_size).
        RuntimeError / DistStoreError: a member did not connect within ``timeout_sec``.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"weight transfer rank {rank} must lie in [0, world_size={world_size})")
    timeout = datetime.timedelta(seconds=timeout_sec)
    store = dist.TCPStore(master_address, master_port, world_size, rank == 0, timeout=timeout)
    return dist.ProcessGroupGloo(dist.PrefixStore("fireflash-vllm-transfer", store), rank, world_size, timeout)


def gloo_broadcast(group: dist.ProcessGroup, tensor: torch.Tensor) -> None:
    """``tensor`` from rank 0 to every member of a ``stateless_gloo_group`` (in place on receivers)."""
    opts = dist.BroadcastOptions()
    opts.rootRank, opts.rootTensor = 0, 0
    group.broadcast([tensor], opts).wait()


class VLLMTrainerTransfer:
    """Trainer rank 0 of a vLLM weight-transfer group; ``send`` is the ``Broadcast`` a ``VLLMEngine`` runs during
    ``/update_weights``.

    Args:
        backend: 'nccl' (vLLM's ``NCCLWeightTransferEngine``; GPUs) or 'gloo' (FireFlash's CPU stand-in).
        packed: vLLM's packed transfer (must match the client's ``update_info.packed``; NCCL only).
        dtype: cast floating-point tensors to this dtype before sending (the server's dtype, e.g. bf16); the
            names posted to ``/update_weights`` carry the cast dtype.
        device: the trainer's CUDA device for 'nccl' (e.g. 'cuda:1'); set in every thread that joins or sends,
            since CUDA's current device is per thread (``join`` and ``send`` usually run in worker threads). None:
            that thread's current device.
    """

    def __init__(
        self, backend: str = "nccl", *, packed: bool = False, dtype: torch.dtype | None = None,
        device: str | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"vLLM weight transfer backend {backend!r}: use 'nccl' (a vLLM server started with "
                             "--weight-transfer-config '{\"backend\": \"nccl\"}') or 'gloo' (FireFlash's stand-in)")
        if packed and backend != "nccl":
            raise ValueError("packed vLLM weight transfer needs backend 'nccl' (vLLM's packed_tensor buffers)")
        self.backend, self.packed, self.dtype, self.device = backend, packed, dtype, device
        self.group: Any = None

    def _on_device(self) -> None:
        if self.backend == "nccl" and self.device is not None:
            torch.cuda.set_device(self.device)

    def join(self, master_address: str, master_port: int, world_size: int, timeout_sec: float = 300.0) -> None:
        """Create the group as rank 0; blocks until every server worker has joined (their
        ``/init_weight_transfer_engine`` runs concurrently). Leaves an earlier group.

        Raises:
            ImportError: backend 'nccl' without vLLM installed in this process.
        """
        self.leave()
        self._on_device()
        if self.backend == "nccl":
            from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

            self.group = NCCLWeightTransferEngine.trainer_init(
                {"master_address": master_address, "master_port": master_port, "world_size": world_size}
            )
        else:
            self.group = stateless_gloo_group(master_address, master_port, 0, world_size, timeout_sec)

    def leave(self) -> None:
        """Drop the group (vLLM's communicator is released by reference, as its ``shutdown`` does)."""
        self.group = None

    def cast(self, named: Sequence[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
        """``named`` with floating-point tensors in ``dtype`` (what ``send`` sends and the specs must describe)."""
        if self.dtype is None:
            return list(named)
        return [(n, t.to(self.dtype) if t.is_floating_point() else t) for n, t in named]

    def send(self, named: list[tuple[str, torch.Tensor]]) -> None:
        """Broadcast every tensor of ``named``, in order, as the servers' ``/update_weights`` expects.

        Raises:
            RuntimeError: ``join`` has not run.
        """
        if self.group is None:
            raise RuntimeError("VLLMTrainerTransfer.send before join: call join(...) while the servers call "
                               "/init_weight_transfer_engine")
        named = self.cast(named)
        self._on_device()
        if self.backend == "nccl":
            from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

            device = self.device or "cuda"
            on_gpu = ((n, t.detach().to(device).contiguous()) for n, t in named)
            NCCLWeightTransferEngine.trainer_send_weights(on_gpu, {"group": self.group, "packed": self.packed})
            return
        for _, t in named:
            gloo_broadcast(self.group, t.detach().to("cpu").contiguous())
