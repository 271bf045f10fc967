"""Weight pushes from the trainer workers to the engine servers, after every optimizer step (RECIPE.md §1).

      trainer rank 0 ══ weight-update group (NCCL, gloo on CPU) ══►   ServerWeightSync (the driver's side):
      TrainerWeightSender (in the trainer worker)                       'collective': rank 0 broadcasts each tensor
                                                                          once while every server receives it
      save_weights → weights-v{N}/ (HF directory)                       'disk': rank 0 saves an HF directory, every
                                                                          server loads it (/update_weights_from_disk)

RECIPE.md §1: the trainer pushes new weights to the inference engines after every step (reference: NCCL) and
in-flight attempts continue; each result carries the version the server reports. A state dict that fits one
bucket (``engine.weight_sync_bucket_mb``) goes in one call and no pause is sent: SGLang takes an update once the
requests it is sampling have finished (its model-update lock) and holds new ones until it is done, so every turn is
sampled by one version, and the trainer's broadcast waits meanwhile — so ``engine.weight_sync_timeout_sec`` must
exceed the longest turn. A larger one goes in one call per bucket between ``/pause_generation`` (``engine.pause_mode``:
'abort' turns return and are retried, 'retract' turns resume on the new weights and report the oldest version) and
``/continue_generation`` (``SGLangEngine.receive_broadcast``). FireFlash's own server installs between decode
steps, with the same one-version-per-turn result. The group's members are the servers that are up (each is
pinged before the group is formed and before every update): a server that dies is dropped (the group is formed
anew without it) and joins a new group when Ray has restarted it.

vLLM servers (``engine.kind = 'vllm'``, ``protocol = 'vllm'``) take the same broadcast through vLLM's own weight-transfer
group: trainer rank 0 is its rank 0 through ``engines/vllm_transfer.VLLMTrainerTransfer`` (vLLM's NCCL trainer side on
GPUs, its gloo stand-in on CPU), each server joins with ``/init_weight_transfer_engine`` and receives during
``/update_weights`` between ``/pause?mode=wait`` and ``/resume`` (``VLLMEngine.receive_broadcast``); there is no route
to leave a group, so a server joins the next one in place. Disk updates do not exist for vLLM.

Simplifications, named: a server that dies in the middle of a transfer leaves trainer rank 0 blocked in the
collective until ``weight_sync_timeout_sec`` (gloo then raises and the update is retried without it; NCCL's
watchdog may abort the trainer process, which ends the run: ``--resume`` continues from the last checkpoint).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from fireflash.runtime.servers import ServerClient


class TrainerWeightSender:
    """Trainer rank 0's end of the weight-update group with the servers (lives in the trainer worker).

    Every trainer rank runs ``TrainerWorker.weight_specs`` / ``broadcast_weights`` / ``save_weights``: a sharded
    trainer gathers its full weights collectively, and only rank 0 (whose ``state_dict`` holds them) sends or writes.
    """

    def __init__(self) -> None:
        self.group: Any = None
        self.transfer: Any = None  # VLLMTrainerTransfer, when the servers are vLLM's
        self.send: Callable[[list[tuple[str, Any]]], None] | None = None

    def join(
        self, address: str, port: int, world_size: int, backend: str, group_name: str, timeout_sec: float,
        protocol: str = "sglang",
    ) -> None:
        """Create the group as its rank 0 (blocks until every server has joined); leaves an earlier one.

        ``protocol``: 'sglang' (a torch process group named ``group_name``, SGLang's ``init_weights_update_group``) or
        'vllm' (vLLM's stateless weight-transfer group on ``backend``; ``group_name`` unused).

        Raises:
            ValueError: another protocol.
        """
        from fireflash.engines.weight_sync import init_weight_update_group, tensor_broadcaster

        self.leave()
        if protocol == "vllm":
            from fireflash.engines.vllm_transfer import VLLMTrainerTransfer

            self.transfer = VLLMTrainerTransfer(backend)
            self.transfer.join(address, port, world_size, timeout_sec)
            self.send = self.transfer.send
        elif protocol == "sglang":
            self.group = init_weight_update_group(address, port, 0, world_size, backend, group_name, timeout_sec)
            self.send = tensor_broadcaster(self.group, "cuda" if backend == "nccl" else "cpu")
        else:
            raise ValueError(f"weight-update protocol {protocol!r}: use 'sglang' or 'vllm' (engine.kind)")

    def leave(self) -> None:
        if self.transfer is not None:
            self.transfer.leave()
            self.transfer = self.send = None
        if self.group is not None:
            import torch.distributed as dist

            dist.destroy_process_group(self.group)
            self.group = self.send = None

    @staticmethod
    def specs(state: Mapping[str, Any]) -> list[Any]:
        from fireflash.engines.weights import specs_of

        return specs_of(list(state.items()))

    def broadcast(self, state: Mapping[str, Any]) -> None:
        """Send every tensor of ``state``, in order (``state`` empty on ranks other than 0: nothing to do).

        Raises:
            RuntimeError: rank 0 has not joined a group.
        """
        if not state:
            return
        if self.send is None:
            raise RuntimeError("broadcast before join: the driver connects the weight-update group first")
        self.send(list(state.items()))


def save_weights(model: Any, tokenizer: Any, state: Mapping[str, Any], root: Path, version: int) -> Path:
    """Write ``root/weights-v{version:06d}`` (an HF directory) for servers to load; keeps the newest two."""
    from fireflash.engines.weight_sync import DiskWeightSync

    path = DiskWeightSync(root, model, tokenizer).save(state, version)
    for old in sorted(root.glob("weights-v*"))[:-2]:
        shutil.rmtree(old, ignore_errors=True)
    return path



class ServerWeightSync:
    """The driver's side of pushing new weights from the trainer workers to the engine servers (RECIPE.md §1).

    Args:
        mode: 'collective' (a weight-update group, trainer rank 0 = group rank 0) or 'disk' (an HF directory
            per version under ``weights_dir``, which every server must see).
        connect: builds a control client for a server URL (``SGLangEngine``).
        ranks_per_server: group ranks each server takes (its tensor-parallel size; 1 for a CPU server).
        backend: 'nccl' (GPUs) or 'gloo' (CPU).
        weights_dir: where disk mode writes.
        timeout_sec: a member that does not join, or a transfer that stalls, fails after this long.
        protocol: the servers' weight-update API, ``engine.kind``: 'sglang' or 'vllm' (collective only).

    Raises:
        ValueError: 'vllm' with mode 'disk' (vLLM's RL routes take weights only through their group).
    """

    def __init__(
        self,
        mode: Literal["collective", "disk"],
        connect: ServerClient,
        ranks_per_server: int,
        backend: str,
        weights_dir: Path,
        timeout_sec: float,
        protocol: str = "sglang",
    ) -> None:
        if protocol == "vllm" and mode != "collective":
            raise ValueError("engine.kind = 'vllm' takes new weights only through its weight-transfer group: use "
                             "engine.weight_sync = 'collective'")
        self.protocol = protocol
        self.mode, self.connect, self.ranks_per_server = mode, connect, ranks_per_server
        self.backend, self.weights_dir, self.timeout_sec = backend, Path(weights_dir), timeout_sec
        self.clients: dict[str, Any] = {}  # by URL
        self.members: tuple[str, ...] = ()  # URLs of the current group, in rank order
        self.group_of: dict[str, str] = {}  # URL → the group it joined last (left before it joins another)
        self._leaving: set[asyncio.Future[Any]] = set()  # leave calls still running
        self.generation = 0
        self.specs: list[Any] | None = None

    def _client(self, url: str) -> Any:
        if url not in self.clients:
            self.clients[url] = self.connect(url)
        return self.clients[url]

    async def join(self, trainers: Sequence[Any], urls: Sequence[str]) -> None:
        """Form a new weight-update group of trainer rank 0 and the servers at ``urls`` (collective mode)."""
        if self.mode != "collective" or tuple(urls) == self.members:
            return
        # servers leave the group they joined last (a gloo group holds sockets, an NCCL one GPU memory), in the
        # background: after a failed transfer a survivor is still receiving on it until weight_sync_timeout_sec,
        # and its leave waits for that; the new group, under a new name, does not
        for u in urls:
            if u in self.group_of:
                leave = getattr(self._client(u), "destroy_weight_sync", None)  # vLLM has no route to leave
                name = self.group_of.pop(u)
                if leave is not None:
                    self._background(leave(name))
        self.generation += 1
        name = f"fireflash-weights-{self.generation}"
        address, port = await trainers[0].address.remote()
        world = 1 + self.ranks_per_server * len(urls)
        clients = [self._client(u) for u in urls]
        for u, c in zip(urls, clients):
            c.group_name = self.group_of[u] = name
        await asyncio.gather(
            trainers[0].join_weight_group.remote(address, port, world, self.backend, name, self.timeout_sec,
                                                 self.protocol),
            *(c.init_weight_sync(address, port, world, rank_offset=1 + i * self.ranks_per_server, backend=self.backend)
              for i, c in enumerate(clients)),
        )
        self.members = tuple(urls)
        if self.specs is None:
            self.specs = next(s for s in await asyncio.gather(*(t.weight_specs.remote() for t in trainers)) if s)

    async def publish(self, trainers: Sequence[Any], urls: Sequence[str], version: int) -> None:
        """Install the trainer's current weights, tagged ``version``, in every server at ``urls``.

        Collective: ``join`` must have formed a group of exactly these servers. In-flight requests finish on
        the weights they started with (the server takes the update between its requests' turns).

        Raises:
            Any client or actor error: a server failed during the update (the caller drops it and retries).
        """
        if self.mode == "collective":
            if tuple(urls) != self.members or self.specs is None:
                raise RuntimeError(f"publish to {list(urls)} but the group holds {list(self.members)}: join them first")
            await asyncio.gather(
                *(t.broadcast_weights.remote() for t in trainers),
                *(self._client(u).receive_broadcast(self.specs, version) for u in urls),
            )
        else:
            paths = await asyncio.gather(*(t.save_weights.remote(str(self.weights_dir), version) for t in trainers))
            path = Path(next(p for p in paths if p))
            await asyncio.gather(*(self._client(u).update_weights(path, version) for u in urls))

    def _background(self, call: Any) -> None:
        """Run a best-effort control call without waiting for it (its failure changes nothing)."""
        task = asyncio.ensure_future(call)
        self._leaving.add(task)
        task.add_done_callback(lambda t: (self._leaving.discard(t), t.cancelled() or t.exception()))

    def reset(self) -> None:
        """Forget the current group after a failed update: the next ``join`` forms a new one."""
        self.members = ()

    async def forget(self, url: str) -> None:
        """Drop the client of a server that moved or died (its process, and its groups, are gone)."""
        self.group_of.pop(url, None)
        client = self.clients.pop(url, None)
        if client is not None and hasattr(client, "close"):
            await client.close()

    async def close(self) -> None:
        for task in self._leaving:
            task.cancel()
        for url in list(self.clients):
            await self.forget(url)

