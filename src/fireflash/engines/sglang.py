"""SGLang client: native ``/generate`` with token ids and logprobs, weight sync, pause/continue.

Wire format (SGLang ``io_struct.GenerateReqInput`` and the native API docs):

    POST /generate {"input_ids": [...], "rid": ..., "sampling_params": {"temperature", "top_p",
        "max_new_tokens", "stop_token_ids", "ignore_eos": true, "no_stop_trim": true, ...},
        "return_logprob": true, "top_logprobs_num": K, "logprob_start_len": -1}
    → {"output_ids": [...], "meta_info": {"finish_reason": {"type": "stop"|"length"|"abort", ...},
        "cached_tokens", "weight_version", "output_token_logprobs": [[logprob, id, text], ...],
        "output_top_logprobs": [[[logprob, id, text], ...], ...]}}

Logprobs: SGLang returns log softmax(logits / temperature) — the distribution ``GenerateResult``
promises — unless the server runs with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1`` (pre-temperature); the
launch helper removes that variable. Generation stops only at ``stop_token_ids`` (``ignore_eos``), as in
the local engine.

Weight sync: an HF directory goes through ``/update_weights_from_disk``; a state dict goes through NCCL
(``/init_weights_update_group`` once, then ``/update_weights_from_distributed`` while the trainer
broadcasts), which needs a ``broadcast`` callable from the trainer side. ``receive_broadcast(specs, version)``
is the server's half alone: with several servers in one group the trainer broadcasts once
(``weight_sync.tensor_broadcaster``) while each server's client calls it. ``weight_version`` is sent as a
string and read back from ``meta_info``.

Serve the same API from a CPU engine (tests, CPU nodes): ``fireflash.engines.serve``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import torch

from fireflash.engines.http import (
    EngineHTTPError,
    EngineRequestError,
    JSONClient,
    flags_from_args,
    start_server,
)
from fireflash.engines.weights import Broadcast, TensorSpec, specs_of
from fireflash.protocols import GenerateRequest, GenerateResult

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


class SGLangEngine:
    """``protocols.Engine`` backed by an SGLang server.

    Args:
        url: server base URL.
        timeout_sec / max_retries / backoff_sec: see ``http.JSONClient``.
        pause_mode: '/pause_generation' mode: 'abort' (in-flight requests return now, finish_reason
            'abort', every token on the old version), 'retract' or 'in_place' (they resume after
            ``resume()``, possibly on new weights: their result reports the version at completion).
        broadcast: trainer-side NCCL sender for state-dict updates (``init_weight_sync`` first).
        group_name: the weight-update group's name on the server.
        flush_cache: ask the server to flush its KV/prefix cache after a weight update. SGLang asserts that the
            flush succeeds, and it fails while requests remain in the server (e.g. paused 'in_place'): turn it
            off to update with attempts in flight; cached prefixes then keep KV computed by the old weights.
        transport: httpx transport override (tests).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_sec: float = 600.0,
        max_retries: int = 3,
        backoff_sec: float = 0.5,
        pause_mode: str = "abort",
        broadcast: Broadcast | None = None,
        group_name: str = "weight_update_group",
        flush_cache: bool = True,
        weight_version: int = 0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if pause_mode not in ("abort", "retract", "in_place"):
            raise ValueError(
                f"engine.pause_mode {pause_mode!r}: SGLang accepts 'abort', 'retract' or 'in_place'"
            )
        self.http = JSONClient(url, timeout_sec, max_retries, backoff_sec, transport)
        self.pause_mode = pause_mode
        self.broadcast = broadcast
        self.group_name = group_name
        self.flush_cache = flush_cache
        self._version = weight_version

    @property
    def weight_version(self) -> int:
        return self._version

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """One ``/generate`` call per request, concurrently (the server batches them).

        Raises:
            EngineRequestError / EngineHTTPError / EngineTimeout: see ``http.JSONClient.request``.
            EngineHTTPError: a response without the logprob fields (server too old or misconfigured).
        """
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    def _payload(self, req: GenerateRequest) -> dict[str, Any]:
        p = req.params
        sampling: dict[str, Any] = {
            "temperature": p.temperature,
            "top_p": p.top_p,
            "max_new_tokens": p.max_new_tokens,
            "stop_token_ids": p.stop_token_ids,
            "ignore_eos": True,
            "no_stop_trim": True,
            "skip_special_tokens": False,
        }
        if p.seed is not None:
            sampling["sampling_seed"] = p.seed
        return {
            "input_ids": req.prompt_ids,
            "rid": req.request_id,
            "sampling_params": sampling,
            "return_logprob": True,
            "top_logprobs_num": p.n_top_logprobs,
            "logprob_start_len": -1,
        }

    async def _one(self, req: GenerateRequest) -> GenerateResult:
        version_at_submit = self._version
        body = await self.http.post("/generate", self._payload(req))
        try:
            meta = body["meta_info"]
            token_lps = meta["output_token_logprobs"]
            top = meta.get("output_top_logprobs") or [[] for _ in token_lps]
        except (KeyError, TypeError) as e:
            raise EngineHTTPError(
                f"SGLang /generate answer for {req.request_id!r} lacks meta_info.{e}: {str(body)[:300]}"
            ) from None
        ids = body.get("output_ids") or [int(t[1]) for t in token_lps]
        k = req.params.n_top_logprobs
        finish = meta.get("finish_reason") or {}
        finish_type = finish.get("type") if isinstance(finish, dict) else str(finish)
        version = meta.get("weight_version")
        return GenerateResult(
            request_id=req.request_id,
            token_ids=[int(t) for t in ids],
            logprobs=[float(t[0]) for t in token_lps],
            topk_ids=[[int(c[1]) for c in row[:k]] for row in top],
            topk_logprobs=[[float(c[0]) for c in row[:k]] for row in top],
            finish_reason=_FINISH.get(finish_type, "abort"),
            weight_version=int(version) if str(version).lstrip("-").isdigit() else version_at_submit,
            n_cached_prompt_tokens=int(meta.get("cached_tokens", 0) or 0),
            timings_sec={"e2e": float(meta.get("e2e_latency", 0.0) or 0.0)},
        )

    async def init_weight_sync(
        self,
        master_address: str,
        master_port: int,
        world_size: int,
        rank_offset: int = 1,
        backend: str = "nccl",
    ) -> None:
        """Ask the server to join the trainer's weight-update group (``/init_weights_update_group``).

        The trainer is rank 0 and joins the same group itself (concurrently; the call blocks until both do).
        """
        await self._checked(
            "/init_weights_update_group",
            {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": rank_offset,
                "world_size": world_size,
                "group_name": self.group_name,
                "backend": backend,
            },
        )

    async def destroy_weight_sync(self, group_name: str | None = None) -> None:
        """Ask the server to leave the weight-update group ``group_name`` (default: this client's
        ``group_name``) through ``/destroy_weights_update_group``, e.g. once a new group is formed without a member
        that died.

        Raises:
            EngineRequestError: the server is not in that group.
        """
        await self._checked("/destroy_weights_update_group", {"group_name": group_name or self.group_name})

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | Path, version: int) -> None:
        """Install new weights tagged ``version``: a directory via disk, a state dict via NCCL.

        Raises:
            EngineRequestError: the server refused (``success: false`` or 4xx), message included.
            ValueError: a state dict without a ``broadcast`` sender.
        """
        if isinstance(weights, (str, Path)):
            await self._checked(
                "/update_weights_from_disk",
                {
                    "model_path": str(weights),
                    "weight_version": str(version),
                    "flush_cache": self.flush_cache,
                    "abort_all_requests": False,
                },
            )
        else:
            if self.broadcast is None:
                raise ValueError(
                    "SGLangEngine.update_weights got a state dict but has no broadcast sender: build it with "
                    "broadcast=... after init_weight_sync(...), or pass an HF directory saved by the trainer"
                )
            named = list(weights.items())
            await asyncio.gather(
                self.receive_broadcast(specs_of(named), version), asyncio.to_thread(self.broadcast, named)
            )
        self._version = version

    async def receive_broadcast(self, specs: Sequence[TensorSpec], version: int) -> None:
        """The server's half of a collective update: it receives each tensor of ``specs``, in order, from group
        rank 0 (``/update_weights_from_distributed``) and installs them as ``version``; returns once it has.

        Someone else broadcasts meanwhile (the trainer's ``weight_sync.tensor_broadcaster(group)``, once for every
        server of the group); ``init_weight_sync`` first. Sets ``weight_version``.

        Raises:
            EngineRequestError: the server refused (unknown group, bad specs, weights that do not fit).
        """
        names, dtypes, shapes = [], [], []
        for name, dtype, shape in specs:
            names.append(name)
            dtypes.append(dtype)
            shapes.append(list(shape))
        body = {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": self.group_name,
            "weight_version": str(version),
            "flush_cache": self.flush_cache,
        }
        await self._checked("/update_weights_from_distributed", body)
        self._version = version

    async def pause(self) -> None:
        """``/pause_generation`` with ``pause_mode``."""
        await self.http.post("/pause_generation", {"mode": self.pause_mode})

    async def resume(self) -> None:
        """``/continue_generation``."""
        await self.http.post("/continue_generation", {})

    async def close(self) -> None:
        await self.http.aclose()

    async def _checked(self, path: str, body: dict[str, Any]) -> None:
        answer = await self.http.post(path, body)
        if isinstance(answer, dict) and answer.get("success") is False:
            raise EngineRequestError(f"SGLang {path} refused: {answer.get('message', answer)}")


def sglang_command(
    model_path: str, port: int, args: Mapping[str, Any] | None = None, host: str = "127.0.0.1"
) -> list[str]:
    """``python -m sglang.launch_server`` with SGLang's own flags passed through verbatim, e.g.
    ``{"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "mem_fraction_static": 0.7}``."""
    return [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path,
        "--host",
        host,
        "--port",
        str(port),
    ] + (flags_from_args(args or {}))


def launch_sglang(
    model_path: str,
    port: int = 30000,
    args: Mapping[str, Any] | None = None,
    timeout_sec: float = 600.0,
    log_path: Path | None = None,
    host: str = "127.0.0.1",
    die_with_parent: bool = False,
) -> subprocess.Popen:
    """Start an SGLang server and wait for ``/health``; the caller terminates the returned process (it is killed
    here if it never becomes healthy).

    ``SGLANG_RETURN_ORIGINAL_LOGPROB`` is removed from its environment so logprobs are post-temperature.
    ``host``: the interface it listens on ('0.0.0.0': every interface; health is then asked on 127.0.0.1).
    ``die_with_parent``: the kernel kills the server when the calling thread's process dies
    (``http.die_with_parent_hook``).

    Raises:
        EngineHTTPError: the server exited or did not become healthy in time (see its log).
    """
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_RETURN_ORIGINAL_LOGPROB"}
    return start_server(sglang_command(model_path, port, args, host), port, timeout_sec, host=host, log_path=log_path,
                        env=env, die_with_parent=die_with_parent)
