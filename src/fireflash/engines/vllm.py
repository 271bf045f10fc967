"""vLLM client: OpenAI completions with prompt token ids and logprobs, native weight transfer, pause/resume.

Wire format (vLLM's OpenAI-compatible server and ``entrypoints/serve/dev/rlhf``):

    POST /v1/completions {"model", "prompt": [ids], "max_tokens", "temperature", "top_p", "logprobs": K,
        "stop_token_ids", "ignore_eos": true, "return_tokens_as_token_ids": true, "return_token_ids": true,
        "skip_special_tokens": false, "seed"}
    → {"choices": [{"token_ids": [...], "finish_reason", "logprobs": {"tokens": ["token_id:12", ...],
        "token_logprobs": [...], "top_logprobs": [{"token_id:12": -0.1, ...}, ...]}}]}

Server requirements (``launch_vllm`` sets them): ``--logprobs-mode processed_logprobs`` so logprobs are
after temperature (the default ``raw_logprobs`` is before it), ``--max-logprobs`` >= K, and
``VLLM_SERVER_DEV_MODE=1`` for ``/pause``, ``/resume`` and the weight-transfer routes. vLLM's processed
logprobs also include top-p truncation, so this client refuses ``top_p < 1`` rather than return numbers
the trainer cannot reproduce. vLLM may return K+1 candidates (the sampled one added); the K best are kept.

Weight transfer: ``/init_weight_transfer_engine`` once, then per update ``/start_weight_update``,
``/update_weights`` (while the trainer broadcasts over NCCL or IPC) and ``/finish_weight_update`` with
the ``weight_version``. An HF directory is read and sent the same way. ``receive_broadcast(specs, version)`` is
the server's half alone, for a driver whose trainer broadcasts once to several servers. The calls that meet the
trainer in a collective (``/init_weight_transfer_engine``, ``/update_weights``) are never retried: a repeated
receive would wait for a broadcast that already happened.

Weight version of a result: vLLM's completions do not report one, so a result carries the version this client
installed last, and raises ``WeightVersionMissing`` when an update went through this client while it ran (its
tokens may come from two versions). A server updated by anyone else is mislabeled: ``fireflash train`` refuses
vLLM for that reason.
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
    JSONClient,
    WeightVersionMissing,
    flags_from_args,
    start_server,
)
from fireflash.engines.weights import Broadcast, TensorSpec, read_weights, specs_of
from fireflash.protocols import GenerateRequest, GenerateResult

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def _token_id(token: str) -> int:
    """``"token_id:123"`` → 123 (``return_tokens_as_token_ids``)."""
    prefix, _, value = token.partition(":")
    if prefix != "token_id" or not value.lstrip("-").isdigit():
        raise EngineHTTPError(
            f"vLLM token {token!r} is not 'token_id:N'; is return_tokens_as_token_ids supported?"
        )
    return int(value)


class VLLMEngine:
    """``protocols.Engine`` backed by a vLLM server.

    Args:
        url: server base URL.
        model: the served model name; None asks ``/v1/models`` on first use.
        timeout_sec / max_retries / backoff_sec: see ``http.JSONClient``.
        pause_mode: ``/pause`` mode: 'abort' (in-flight requests return now, finish_reason 'abort'),
            'wait' (returns once they finish: every token on the old version), 'keep' (they resume later,
            possibly on new weights).
        broadcast: trainer-side sender run concurrently with ``/update_weights``.
        packed: ask vLLM for packed (batched) broadcasting.
        transport: httpx transport override (tests).
    """

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        timeout_sec: float = 600.0,
        max_retries: int = 3,
        backoff_sec: float = 0.5,
        pause_mode: str = "abort",
        broadcast: Broadcast | None = None,
        packed: bool = False,
        weight_version: int = 0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if pause_mode not in ("abort", "wait", "keep"):
            raise ValueError(f"engine.pause_mode {pause_mode!r}: vLLM accepts 'abort', 'wait' or 'keep'")
        self.http = JSONClient(url, timeout_sec, max_retries, backoff_sec, transport)
        self.model = model
        self.pause_mode = pause_mode
        self.broadcast = broadcast
        self.packed = packed
        self._version = weight_version

    @property
    def weight_version(self) -> int:
        return self._version

    async def _model_name(self) -> str:
        if self.model is None:
            models = await self.http.get("/v1/models")
            self.model = models["data"][0]["id"]
        return self.model

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """One completion per request, concurrently.

        Raises:
            ValueError: ``params.top_p < 1`` (see the module docstring).
            EngineRequestError / EngineHTTPError / EngineTimeout: see ``http.JSONClient.request``.
            WeightVersionMissing: an update went through this client while a request ran.
        """
        for req in requests:
            if req.params.top_p < 1.0:
                raise ValueError(
                    f"request {req.request_id!r}: params.top_p = {req.params.top_p}; vLLM reports logprobs after "
                    "top-p truncation, which the trainer cannot reproduce: use top_p = 1 or the SGLang engine"
                )
        model = await self._model_name()
        return list(await asyncio.gather(*(self._one(model, r) for r in requests)))

    async def _one(self, model: str, req: GenerateRequest) -> GenerateResult:
        p = req.params
        payload: dict[str, Any] = {
            "model": model,
            "prompt": req.prompt_ids,
            "max_tokens": p.max_new_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "logprobs": p.n_top_logprobs,
            "stop_token_ids": p.stop_token_ids,
            "ignore_eos": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "request_id": req.request_id,
        }
        if p.seed is not None:
            payload["seed"] = p.seed
        version_at_submit = self._version
        body = await self.http.post("/v1/completions", payload)
        if self._version != version_at_submit:
            raise WeightVersionMissing(
                f"vLLM server {self.http.base_url} does not report the weight version of {req.request_id!r}, and weight "
                f"version {self._version} was installed while it ran on {version_at_submit}: its tokens may come from both"
            )
        try:
            choice = body["choices"][0]
            lp = choice["logprobs"]
            tokens = [_token_id(t) for t in lp["tokens"]]
            token_logprobs = [float(x) for x in lp["token_logprobs"]]
            top_rows = lp.get("top_logprobs") or [{} for _ in tokens]
        except (KeyError, TypeError, IndexError) as e:
            raise EngineHTTPError(
                f"vLLM completion for {req.request_id!r} lacks {e}: {str(body)[:300]}"
            ) from None
        ids = choice.get("token_ids") or tokens
        topk_ids, topk_lps = [], []
        for row in top_rows:
            best = sorted(((float(v), _token_id(k)) for k, v in (row or {}).items()), key=lambda x: -x[0])[
                : p.n_top_logprobs
            ]
            topk_ids.append([i for _, i in best])
            topk_lps.append([v for v, _ in best])
        return GenerateResult(
            request_id=req.request_id,
            token_ids=[int(t) for t in ids],
            logprobs=token_logprobs,
            topk_ids=topk_ids,
            topk_logprobs=topk_lps,
            finish_reason=_FINISH.get(choice.get("finish_reason") or "", "abort"),
            weight_version=version_at_submit,
            n_cached_prompt_tokens=int(
                ((body.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            ),
        )

    async def init_weight_sync(
        self, master_address: str, master_port: int, world_size: int, rank_offset: int = 1
    ) -> None:
        """``/init_weight_transfer_engine``: the server's workers join the trainer's group (trainer = rank 0)."""
        await self.http.request(
            "POST",
            "/init_weight_transfer_engine",
            {
                "init_info": {
                    "master_address": master_address,
                    "master_port": master_port,
                    "rank_offset": rank_offset,
                    "world_size": world_size,
                }
            },
            max_retries=0,
        )

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | Path, version: int) -> None:
        """start → update (concurrent with the trainer's broadcast) → finish(weight_version).

        Raises:
            ValueError: no ``broadcast`` sender configured.
            EngineRequestError / EngineHTTPError: the server refused or failed.
        """
        if self.broadcast is None:
            raise ValueError(
                "VLLMEngine.update_weights needs a broadcast sender (vLLM receives weights over NCCL/IPC): build "
                "it with broadcast=... and call init_weight_sync(...) first"
            )
        named = list((read_weights(weights) if isinstance(weights, (str, Path)) else weights).items())
        await asyncio.gather(
            self.receive_broadcast(specs_of(named), version), asyncio.to_thread(self.broadcast, named)
        )

    async def receive_broadcast(self, specs: Sequence[TensorSpec], version: int) -> None:
        """The server's half of a collective update: start → ``/update_weights`` for ``specs`` (the server
        receives them while someone else broadcasts) → finish(weight_version); sets ``weight_version``.

        Raises:
            EngineRequestError / EngineHTTPError: the server refused or failed.
        """
        names, dtypes, shapes = [], [], []
        for name, dtype, shape in specs:
            names.append(name)
            dtypes.append(dtype)
            shapes.append(list(shape))
        update_info = {"names": names, "dtype_names": dtypes, "shapes": shapes, "packed": self.packed}
        await self.http.post("/start_weight_update", {"is_checkpoint_format": True})
        await self.http.request("POST", "/update_weights", {"update_info": update_info}, max_retries=0)
        await self.http.post("/finish_weight_update", {"weight_version": str(version)})
        self._version = version

    async def pause(self) -> None:
        """``POST /pause?mode=...``."""
        await self.http.post("/pause", params={"mode": self.pause_mode})

    async def resume(self) -> None:
        """``POST /resume``."""
        await self.http.post("/resume")

    async def close(self) -> None:
        await self.http.aclose()


def vllm_command(
    model_path: str, port: int, args: Mapping[str, Any] | None = None, host: str = "127.0.0.1"
) -> list[str]:
    """``vllm serve`` with vLLM's own flags passed through verbatim; ``--logprobs-mode processed_logprobs``
    and ``--max-logprobs 32`` are added unless ``args`` sets them."""
    merged = {"logprobs_mode": "processed_logprobs", "max_logprobs": 32, **(args or {})}
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model_path,
        "--host",
        host,
        "--port",
        str(port),
    ] + (flags_from_args(merged))


def launch_vllm(
    model_path: str,
    port: int = 8000,
    args: Mapping[str, Any] | None = None,
    timeout_sec: float = 600.0,
    log_path: Path | None = None,
) -> subprocess.Popen:
    """Start ``vllm serve`` with ``VLLM_SERVER_DEV_MODE=1`` and wait for ``/health``.

    Raises:
        EngineHTTPError: the server exited or did not become healthy in time (see its log).
    """
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    return start_server(vllm_command(model_path, port, args), port, timeout_sec, log_path=log_path, env=env)
