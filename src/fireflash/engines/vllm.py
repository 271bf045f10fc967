"""vLLM client: OpenAI completions with prompt token ids and logprobs, native weight transfer, pause/resume.

Checked against vLLM 0.33 (main as of 2026-11; ``vllm/entrypoints/openai/completion/protocol.py``,
``vllm/entrypoints/serve/dev/rlhf/api_router.py``, ``vllm/v1/core/sched/utils.py``); the recorded shapes are in
``tests/engines/contracts/vllm_0.33/``. Wire format:

    POST /v1/completions {"model", "prompt": [ids], "max_tokens", "temperature", "top_p", "top_k": 0, "min_p": 0,
        "repetition_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0, "logprobs": K, "stop_token_ids",
        "ignore_eos": true, "return_tokens_as_token_ids": true, "return_token_ids": true,
        "skip_special_tokens": false, "seed"}
    → {"choices": [{"token_ids": [...], "finish_reason", "logprobs": {"tokens": ["token_id:12", ...],
        "token_logprobs": [...], "top_logprobs": [{"token_id:12": -0.1, ...}, ...]}}],
       "usage": {"prompt_tokens_details": {"cached_tokens"}}}

Every sampling field vLLM fills from server defaults is sent explicitly: ``CompletionRequest.to_sampling_params``
takes each of temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty and frequency_penalty from the
request, else from the server's ``default_sampling_params`` (the model's ``generation_config.json`` under the
default ``--generation-config auto``, or ``--override-generation-config``), so a model shipping ``top_k = 20``
would silently truncate what the trainer believes is the full softmax. Stop semantics (``check_stop``): a
``stop_token_ids`` hit always stops; ``ignore_eos`` only drops the EOS id (and ``generation_config.json``'s extra
EOS ids) from the stop set, so this client sends ``ignore_eos: true`` and puts the ids it wants in
``stop_token_ids``. A server-side default ``stop_token_ids`` is merged in whatever the request says.

Server requirements (``launch_vllm`` sets them): ``--logprobs-mode processed_logprobs`` so logprobs are
after temperature (the default ``raw_logprobs`` is before it), ``--max-logprobs`` >= K,
``--weight-transfer-config`` (without it vLLM builds no weight-transfer engine and every weight route fails),
``--enable-prompt-tokens-details`` (without it ``usage.prompt_tokens_details`` is null and cached-token counts read
0), and ``VLLM_SERVER_DEV_MODE=1`` for ``/pause``, ``/resume`` and the weight-transfer routes. vLLM's processed
logprobs also include top-p truncation, so this client refuses ``top_p < 1`` rather than return numbers
the trainer cannot reproduce. vLLM may return K+1 candidates (the sampled one added); the K best are kept.

Weight transfer: ``/init_weight_transfer_engine`` once (the trainer joins the same group through
``engines/vllm_transfer.py``, ``trainer_broadcaster``), then per update ``/pause?mode=wait`` (unless the caller
paused: running turns finish on the old weights),
``/start_weight_update``, ``/update_weights`` (while the trainer broadcasts) and ``/finish_weight_update`` with the
``weight_version``, then ``/resume``: vLLM's pause-only RL sequence (``serve/dev/rlhf/rl_state_machine.py``). An HF
directory is read and sent the same way. ``receive_broadcast(specs, version)`` is the server's half alone, for a
driver whose trainer broadcasts once to several servers. The calls that meet the trainer in a collective
(``/init_weight_transfer_engine``, ``/update_weights``) are never retried: a repeated receive would wait for a
broadcast that already happened.

Weight version of a result: vLLM's completions do not report one. A client that installs the weights itself (the
local backend) labels a result with the version it installed last, and raises ``WeightVersionMissing`` when an
update went through it while the request ran (its tokens may come from two versions). A client that samples while
another one updates the server (a rollout worker's on the Ray backend: ``versions_from_server``) asks
``/weight_info`` before each request and labels the result with that version: every update runs under
``/pause?mode=wait``, which lets running requests finish on the old weights and holds new ones until ``/resume``, so
all of a result's tokens come from one version, the one read or a newer one; the one read is the oldest it can be,
the version staleness must count (as SGLang's ``weight_versions`` spans count their oldest). ``fireflash train`` is
the only writer of its servers' weights, so its results are labeled right.
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

from fireflash.engines.config import weight_transfer_backend  # noqa: F401 - re-exported (callers import it here)
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

NEUTRAL_SAMPLING = {"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
                    "frequency_penalty": 0.0}
"""The sampling fields vLLM takes from server defaults when a request omits them (``CompletionRequest.
_DEFAULT_SAMPLING_PARAMS`` less temperature and top_p, which the client always sends), at the values that switch
them off."""


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
        broadcast: trainer-side sender run concurrently with ``/update_weights`` (``trainer_broadcaster`` sets it).
        packed: ask vLLM for packed (batched) broadcasting.
        transfer_backend: the server's ``--weight-transfer-config`` backend, which the trainer's end must match:
            'nccl' (vLLM) or 'gloo' (FireFlash's stand-in, ``engines/vllm_serve.py``).
        transfer_device: the trainer's CUDA device for 'nccl' (``VLLMTrainerTransfer``); None: the current one.
        versions_from_server: label each result with ``/weight_info``'s version read before the request (a client
            that samples while another client updates the server: the Ray backend's rollout workers); False: the
            version this client installed last.
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
        transfer_backend: str = "nccl",
        transfer_device: str | None = None,
        versions_from_server: bool = False,
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
        self.transfer_backend, self.transfer_device = transfer_backend, transfer_device
        self.transfer: Any = None  # VLLMTrainerTransfer, when this process is the trainer (trainer_broadcaster)
        self._paused = False  # paused by the caller: an update then neither pauses nor resumes
        self._held = False  # left paused by an update that failed: the next update resumes it
        self.versions_from_server = versions_from_server

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
            # vLLM fills each unset one from generation_config.json (module docstring): the neutral values, explicitly
            **NEUTRAL_SAMPLING,
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
        version_at_submit = await self._server_version(req.request_id) if self.versions_from_server else self._version
        body = await self.http.post("/v1/completions", payload)
        if not self.versions_from_server and self._version != version_at_submit:
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
        self, master_address: str, master_port: int, world_size: int, rank_offset: int = 1, backend: str | None = None
    ) -> None:
        """``/init_weight_transfer_engine``: the server's workers join the trainer's group (trainer = rank 0).

        ``backend`` is accepted for the runtime's SGLang-shaped call and ignored: the server's
        ``--weight-transfer-config`` decides it (``transfer_backend`` here must name the same)."""
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

    def trainer_broadcaster(
        self, master_address: str, master_port: int, world_size: int, backend: str, timeout_sec: float
    ) -> Broadcast:
        """The trainer's end of the group the server joins in ``init_weight_sync`` (run both concurrently; blocks
        until the server has joined): a ``VLLMTrainerTransfer`` on ``transfer_backend`` (``backend``, the runtime's
        choice for SGLang, does not apply: the server's config decides). Sets and returns ``broadcast``.

        Raises:
            ImportError: 'nccl' without vLLM in this process (``pip install 'fireflash[gpu]'``).
        """
        from fireflash.engines.vllm_transfer import VLLMTrainerTransfer

        self.transfer = VLLMTrainerTransfer(self.transfer_backend, packed=self.packed, device=self.transfer_device)
        self.transfer.join(master_address, master_port, world_size, timeout_sec)
        self.broadcast = self.transfer.send
        return self.broadcast

    async def _server_version(self, request_id: str) -> int:
        """The version the server reports now, as an int (module docstring: the oldest a result sent next can have).

        Raises:
            WeightVersionMissing: the server reports none (no update has finished on it) or not an integer.
        """
        version = await self.server_weight_version()
        if version is None or not str(version).lstrip("-").isdigit():
            raise WeightVersionMissing(
                f"vLLM server {self.http.base_url} reports weight_version {version!r} at /weight_info before "
                f"{request_id!r}: the trainer must push its weights (tagged with an integer version) before sampling"
            )
        return int(version)

    async def server_weight_version(self) -> str | None:
        """``GET /weight_info``: the version the server reports (set by ``/finish_weight_update``), or None."""
        return (await self.http.get("/weight_info")).get("weight_version")

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | Path, version: int) -> None:
        """pause → start → update (concurrent with the trainer's broadcast) → finish(weight_version) → resume.

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
        """The server's half of a collective update: pause → start → ``/update_weights`` for ``specs`` (the server
        receives them while someone else broadcasts) → finish(weight_version) → resume; sets ``weight_version``.
        A server the caller paused stays paused (no pause or resume is sent). A failed ``/update_weights`` is finished
        without a version and the server left paused, until an update succeeds (its weights may be half new).

        Raises:
            EngineRequestError / EngineHTTPError: the server refused or failed.
        """
        names, dtypes, shapes = [], [], []
        for name, dtype, shape in specs:
            names.append(name)
            dtypes.append(dtype)
            shapes.append(list(shape))
        update_info = {"names": names, "dtype_names": dtypes, "shapes": shapes, "packed": self.packed}
        paused_here = not self._paused
        if paused_here and not self._held:  # vLLM's pause-only RL sequence: pause → start → update → finish → resume
            # 'wait', whatever pause_mode says: running turns finish on the old weights (as SGLang's update lock
            # does); 'abort' would end every attempt in flight (the harness ends an aborted turn's attempt)
            await self.http.post("/pause", params={"mode": "wait"})
        try:
            await self.http.post("/start_weight_update", {"is_checkpoint_format": True})
        except BaseException:
            if paused_here and not self._held:  # nothing was loaded: serve on
                await self.http.post("/resume")
            raise
        try:
            await self.http.request("POST", "/update_weights", {"update_info": update_info}, max_retries=0)
        except BaseException:
            # rl_state_machine.py answers every later /start_weight_update with 409 until this update finishes, so
            # finish it (no weight_version: the server keeps reporting the old one) and stay paused: vLLM loads each
            # tensor as it arrives, so the weights may be half new; the caller sends all of them again
            self._held = paused_here or self._held
            try:
                await self.http.post("/finish_weight_update", {})
            except Exception:  # noqa: BLE001 - best effort: the server may be the one that died
                pass
            raise
        await self.http.post("/finish_weight_update", {"weight_version": str(version)})
        self._version = version
        if paused_here:
            self._held = False
            await self.http.post("/resume")

    async def pause(self, mode: str | None = None) -> None:
        """``POST /pause?mode=...`` with ``mode``, or ``pause_mode`` when None."""
        await self.http.post("/pause", params={"mode": mode or self.pause_mode})
        self._paused = True

    async def resume(self) -> None:
        """``POST /resume``."""
        await self.http.post("/resume")
        self._paused = self._held = False

    async def close(self) -> None:
        await self.http.aclose()


def vllm_command(
    model_path: str, port: int, args: Mapping[str, Any] | None = None, host: str = "127.0.0.1"
) -> list[str]:
    """``vllm serve`` with vLLM's own flags passed through verbatim; added unless ``args`` sets them:
    ``--logprobs-mode processed_logprobs``, ``--max-logprobs 32``, ``--weight-transfer-config '{"backend": "nccl"}'``
    (without it every weight route fails) and ``--enable-prompt-tokens-details`` (cached-token counts)."""
    merged = {
        "logprobs_mode": "processed_logprobs",
        "max_logprobs": 32,
        "weight_transfer_config": {"backend": "nccl"},
        "enable_prompt_tokens_details": True,
        **(args or {}),
    }
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
    host: str = "127.0.0.1",
    die_with_parent: bool = False,
) -> subprocess.Popen:
    """Start ``vllm serve`` with ``VLLM_SERVER_DEV_MODE=1`` and wait for ``/health``.

    ``host``: the interface it listens on ('0.0.0.0': every interface, as the Ray backend's engine servers do).
    ``die_with_parent``: the kernel kills the server when the calling thread's process dies (``http.die_with_parent_hook``).

    Raises:
        EngineHTTPError: the server exited or did not become healthy in time (see its log).
    """
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    return start_server(vllm_command(model_path, port, args, host), port, timeout_sec, host=host, log_path=log_path,
                        env=env, die_with_parent=die_with_parent)
