"""SGLang client: native ``/generate`` with token ids and logprobs, weight sync, pause/continue.

Wire format (SGLang ``io_struct.GenerateReqInput`` and the native API docs):

    POST /generate {"input_ids": [...], "rid": ..., "sampling_params": {"temperature", "top_p",
        "max_new_tokens", "stop_token_ids", "ignore_eos": false, "no_stop_trim": true, ...},
        "return_logprob": true, "top_logprobs_num": K, "logprob_start_len": -1}
    → {"output_ids": [...], "meta_info": {"finish_reason": {"type": "stop"|"length"|"abort", ...},
        "cached_tokens", "weight_version", "weight_versions" (newer servers: spans),
        "output_token_logprobs": [[logprob, id, text], ...],
        "output_top_logprobs": [[[logprob, id, text], ...], ...]}}

Logprobs: SGLang returns log softmax(logits / temperature) — the distribution ``GenerateResult``
promises — unless the server runs with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1`` (pre-temperature); the
launch helper (``sglang_launch.launch_sglang``) removes that variable.

Stopping: ``ignore_eos`` is sent false. In SGLang ``ignore_eos`` switches off the whole token-based stop check,
``stop_token_ids`` included (``schedule_batch.Req._check_token_based_finish`` returns at once), so a true value
would run every turn to ``max_new_tokens``. With it false a turn stops at a ``stop_token_ids`` entry or at the
model's EOS ids (generation config / tokenizer), whichever comes first; FireFlash's stop lists hold the EOS id
anyway. ``sampling_seed`` is sent only when the server runs with ``--enable-deterministic-inference``
(``engine.args``); elsewhere SGLang ignores or refuses it.

Each HTTP try of a ``/generate`` gets a fresh ``rid`` (``request_id`` + a random suffix): SGLang refuses a rid
that is still in flight, which a retried request after a lost connection would be. A result whose output ids,
log-probs and top-k rows differ in length (speculative decoding v2 returns broken log-probs) raises
``EngineHTTPError``: it costs the attempt one try instead of training on misaligned numbers.

Weight sync: an HF directory goes through ``/update_weights_from_disk``; a state dict goes through NCCL
(``/init_weights_update_group`` once, then ``/update_weights_from_distributed`` while the trainer
broadcasts), which needs a ``broadcast`` callable from the trainer side. A state dict moves in buckets of at most
``bucket_bytes`` (``engine.weight_sync_bucket_mb``): one ``/update_weights_from_distributed`` call per bucket,
listing only that bucket's tensors, ``flush_cache`` on the last call only. SGLang allocates every tensor a call
lists before loading any (``model_runner.update_weights_from_distributed``), on every tensor-parallel rank, beside
``mem_fraction_static``: one call with the whole state dict would need a second unsharded copy of the model per
GPU (slime, verl and AReaL send buckets for the same reason). An update of several buckets is wrapped in
``/pause_generation`` (``pause_mode``) and ``/continue_generation``, so no turn samples half-updated weights
(SGLang takes each call under its model-update lock but runs requests between calls), and ``weight_version``
is sent with the last bucket only, so the version a result reports changes when the last tensor is in.
``receive_broadcast(specs, version)`` is the server's half alone: with several servers in one group the trainer
broadcasts once (``weight_sync.tensor_broadcaster``) while each server's client calls it. ``weight_version`` is sent as a
string and read back from ``meta_info``.

Calls that meet the trainer in a collective (``/init_weights_update_group``, ``/update_weights_from_distributed``)
are sent once, never retried: a repeated receive would wait for a broadcast that already happened. Weight updates
wait up to ``update_timeout_sec`` = max(``timeout_sec``, ``weight_sync_timeout_sec`` + 60 s): the server installs
an update only once the turns it is sampling have finished, so it must outlast the longest turn, and it outlasts
the group's own timeout so that the server's reason comes back. A failed update raises ``WeightSyncFailed``
naming the server, the call and the version.

Weight version of a result: ``meta_info.weight_version``, an integer string; SGLang's ``"default"`` (no
versioned update yet) means the weights the server was launched with, ``weight_version`` of the constructor
(0). Anything else, or none, raises ``WeightVersionMissing``: the client never guesses a version. Newer servers
also return ``meta_info.weight_versions``, the spans of output tokens each version sampled (a turn paused with
'retract' or 'in_place' resumes on new weights); the result then carries the *oldest* version: staleness bounds how
far behind the trainer the worst token of a turn is, and the turn's first tokens are that far behind.

Errors: SGLang answers a refused ``/generate`` 400 ``{"error": {"message": str(e)}}``
(``http_server._create_error_response``) and a refused weight or control call 400 ``{"success": false, "message"}``;
``http.JSONClient`` puts the message itself in the ``EngineRequestError`` (``WeightSyncFailed`` for collectives).

Launch a server: ``fireflash.engines.sglang_launch``. Serve the same API from a CPU engine (tests, CPU nodes):
``fireflash.engines.serve``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import torch
import torch.distributed as dist

from fireflash.engines.http import (
    EngineHTTPError,
    EngineRequestError,
    JSONClient,
    WeightSyncFailed,
    WeightVersionMissing,
)
from fireflash.engines.weight_sync import plan_buckets
from fireflash.engines.weights import Broadcast, TensorSpec, specs_of
from fireflash.protocols import GenerateRequest, GenerateResult

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}
_UPDATE_MARGIN_SEC = 60.0  # a weight update's HTTP call outlasts the group's own timeout by this much


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
        flush_cache: ask the server to flush its KV/prefix cache after a weight update (on the last bucket). SGLang
            asserts that the flush succeeds, and it fails while requests remain in the server, so 'in_place' with
            flush_cache is refused here; with it off, cached prefixes keep KV computed by the old weights.
        bucket_bytes: the most bytes of tensors one ``/update_weights_from_distributed`` call lists (a larger
            tensor goes alone); ``engine.weight_sync_bucket_mb``.
        send_sampling_seed: send ``sampling_seed`` (only to a server launched with
            ``--enable-deterministic-inference``; ``make_engine`` sets it from ``engine.args``).
        weight_version: the version of the weights the server was launched with (what its ``"default"`` means).
        weight_sync_timeout_sec: the weight-update group's timeout (``engine.weight_sync_timeout_sec``); weight
            updates wait ``update_timeout_sec`` = max(timeout_sec, this + 60 s) for the server's answer.
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
        weight_sync_timeout_sec: float = 300.0,
        bucket_bytes: int = 1 << 30,
        send_sampling_seed: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if pause_mode not in ("abort", "retract", "in_place"):
            raise ValueError(
                f"engine.pause_mode {pause_mode!r}: SGLang accepts 'abort', 'retract' or 'in_place'"
            )
        if pause_mode == "in_place" and flush_cache:
            # io_struct.PauseGenerationReqInput: "In 'inplace' mode, flush_cache will fail if there are any requests
            # in the running_batch" — and the scheduler asserts that it succeeds
            raise ValueError(
                "engine.pause_mode = 'in_place' keeps paused requests in SGLang's running batch, where a weight "
                "update's flush_cache fails and stops the scheduler; use engine.pause_mode = 'retract' (or 'abort')"
            )
        if bucket_bytes < 1:
            raise ValueError(f"engine.weight_sync_bucket_mb gives bucket_bytes = {bucket_bytes}; it must be >= 1")
        self.http = JSONClient(url, timeout_sec, max_retries, backoff_sec, transport)
        self.pause_mode = pause_mode
        self.broadcast = broadcast
        # the trainer's end of the weight-update group when this process joined it (local backend): left on close
        self.trainer_group: Any = None
        self.group_name = group_name
        self.flush_cache = flush_cache
        self.weight_sync_timeout_sec = weight_sync_timeout_sec
        self.bucket_bytes = bucket_bytes
        self.send_sampling_seed = send_sampling_seed
        self._version = self._launch_version = weight_version

    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def update_timeout_sec(self) -> float:
        """How long a weight-update call waits for the server's answer, seconds."""
        return max(self.http.timeout_sec, self.weight_sync_timeout_sec + _UPDATE_MARGIN_SEC)

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """One ``/generate`` call per request, concurrently (the server batches them).

        Raises:
            EngineRequestError / EngineHTTPError / EngineTimeout: see ``http.JSONClient.request``.
            EngineHTTPError: a response without the logprob fields (server too old or misconfigured).
            WeightVersionMissing: a response whose ``meta_info.weight_version`` is absent or not an integer.
        """
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    def _payload(self, req: GenerateRequest) -> dict[str, Any]:
        p = req.params
        sampling: dict[str, Any] = {
            "temperature": p.temperature,
            "top_p": p.top_p,
            "max_new_tokens": p.max_new_tokens,
            "stop_token_ids": p.stop_token_ids,
            "ignore_eos": False,  # true would also skip stop_token_ids (schedule_batch._check_token_based_finish)
            "no_stop_trim": True,
            "skip_special_tokens": False,
        }
        if p.seed is not None and self.send_sampling_seed:
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
        payload = self._payload(req)

        def fresh_rid(_try: int) -> dict[str, Any]:
            # SGLang refuses a rid still in flight ("Duplicate request ID"): a retry after a lost connection may be
            return payload | {"rid": f"{req.request_id}-{uuid.uuid4().hex[:8]}"}

        body = await self.http.request("POST", "/generate", fresh_rid)
        try:
            meta = body["meta_info"]
            token_lps = meta["output_token_logprobs"]
            top = meta.get("output_top_logprobs") or [[] for _ in token_lps]
        except (KeyError, TypeError) as e:
            raise EngineHTTPError(
                f"SGLang /generate answer for {req.request_id!r} lacks meta_info.{e}: {str(body)[:300]}"
            ) from None
        ids = body.get("output_ids")
        ids = [int(t[1]) for t in token_lps] if ids is None else ids
        k = req.params.n_top_logprobs
        if not len(ids) == len(token_lps) == len(top):
            raise EngineHTTPError(
                f"SGLang {self.http.base_url}: the /generate answer for {req.request_id!r} has {len(ids)} output_ids, "
                f"{len(token_lps)} output_token_logprobs and {len(top)} output_top_logprobs rows; they must be equal "
                "(speculative decoding v2 returns broken log-probs: run the server without it, or with speculative "
                "decoding v1)"
            )
        finish = meta.get("finish_reason") or {}
        finish_type = finish.get("type") if isinstance(finish, dict) else str(finish)
        return GenerateResult(
            request_id=req.request_id,
            token_ids=[int(t) for t in ids],
            logprobs=[float(t[0]) for t in token_lps],
            topk_ids=[[int(c[1]) for c in row[:k]] for row in top],
            topk_logprobs=[[float(c[0]) for c in row[:k]] for row in top],
            finish_reason=_FINISH.get(finish_type, "abort"),
            weight_version=self._oldest_version(meta, req.request_id),
            n_cached_prompt_tokens=int(meta.get("cached_tokens", 0) or 0),
            timings_sec={"e2e": float(meta.get("e2e_latency", 0.0) or 0.0)},
        )

    def _oldest_version(self, meta: Mapping[str, Any], request_id: str) -> int:
        """The oldest version that sampled a result: the spans of ``meta_info.weight_versions`` when present (a list
        of ``{"version", "start", "end"}`` or of versions), else ``meta_info.weight_version``.

        Raises:
            WeightVersionMissing: a version that is absent, not an integer, or negative.
        """
        spans = meta.get("weight_versions")
        if isinstance(spans, list) and spans:
            values = [span.get("version") if isinstance(span, dict) else span for span in spans]
            return min(self._reported_version(v, request_id) for v in values)
        return self._reported_version(meta.get("weight_version"), request_id)

    def _reported_version(self, value: Any, request_id: str) -> int:
        """``meta_info.weight_version`` as an int (see the module docstring).

        Raises:
            WeightVersionMissing: absent, not an integer, or negative.
        """
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str):
            if value.strip().isdigit():  # a version is >= 0: "-1" would make every turn look stale
                return int(value)
            if value == "default":
                return self._launch_version
        raise WeightVersionMissing(
            f"SGLang server {self.http.base_url}: the /generate answer for {request_id!r} has meta_info.weight_version "
            f"= {value!r}, not an integer >= 0, so the weight version that sampled it is unknown; FireFlash tags every "
            "update with an integer version: use an SGLang that reports weight_version (or FireFlash's server)"
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
        Sent once (never retried). SGLang's request has no timeout field
        (``io_struct.InitWeightsUpdateGroupReqInput``): the server side's NCCL timeout is whatever its launch
        environment gives it; ``weight_sync_timeout_sec`` bounds only this call and the trainer's side.

        Raises:
            WeightSyncFailed: the server refused, failed or did not answer within ``update_timeout_sec``.
        """
        await self._collective(
            "/init_weights_update_group",
            None,
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
            EngineRequestError: the server refused a directory (``success: false`` or 4xx), message included.
            WeightSyncFailed: a state dict's update failed, on the server's side or in ``broadcast``.
            ValueError: a state dict without a ``broadcast`` sender.
        """
        if isinstance(weights, (str, Path)):
            # loading a directory twice is harmless, so this one may be retried
            await self._checked(
                "/update_weights_from_disk",
                {
                    "model_path": str(weights),
                    "weight_version": str(version),
                    "flush_cache": self.flush_cache,
                    "abort_all_requests": False,
                },
                timeout_sec=self.update_timeout_sec,
            )
        else:
            if self.broadcast is None:
                raise ValueError(
                    "SGLangEngine.update_weights got a state dict but has no broadcast sender: build it with "
                    "broadcast=... after init_weight_sync(...), or pass an HF directory saved by the trainer"
                )
            named = list(weights.items())
            await asyncio.gather(
                self.receive_broadcast(specs_of(named), version), self._send(self.broadcast, named, version)
            )
        self._version = version

    async def _send(self, broadcast: Broadcast, named: list[tuple[str, torch.Tensor]], version: int) -> None:
        """The trainer's half of an update, in a thread; its failure names this server and ``version``."""
        try:
            await asyncio.to_thread(broadcast, named)
        except Exception as e:
            raise WeightSyncFailed(self.http.base_url, "trainer broadcast", version, e) from e

    async def receive_broadcast(self, specs: Sequence[TensorSpec], version: int) -> None:
        """The server's half of a collective update: it receives each tensor of ``specs``, in order, from group
        rank 0 (``/update_weights_from_distributed``) and installs them as ``version``; returns once it has.

        Someone else broadcasts meanwhile (the trainer's ``weight_sync.tensor_broadcaster(group)``, once for every
        server of the group); ``init_weight_sync`` first. Sets ``weight_version``. One call per bucket of
        ``bucket_bytes``; several buckets are sent between ``/pause_generation`` (``pause_mode``) and
        ``/continue_generation`` (module docstring).

        Sent once (never retried).

        Raises:
            WeightSyncFailed: the server refused (unknown group, bad specs, weights that do not fit), failed, or did
                not answer within ``update_timeout_sec``.
        """
        buckets = plan_buckets(list(specs), self.bucket_bytes) or [[]]  # no tensors: still one call, the version
        paused = len(buckets) > 1  # one call is atomic under SGLang's model-update lock; several are not
        if paused:
            await self._control("/pause_generation", {"mode": self.pause_mode}, version)
        try:
            for i, bucket in enumerate(buckets):
                last = i == len(buckets) - 1
                body: dict[str, Any] = {
                    "names": [s.name for s in bucket],
                    "dtypes": [s.dtype for s in bucket],
                    "shapes": [list(s.shape) for s in bucket],
                    "group_name": self.group_name,
                    "flush_cache": self.flush_cache and last,
                }
                if last:  # the version a result reports changes once every tensor is in
                    body["weight_version"] = str(version)
                await self._collective("/update_weights_from_distributed", version, body)
        finally:
            if paused:
                await self._control("/continue_generation", {}, version)
        self._version = version

    async def _control(self, path: str, body: dict[str, Any], version: int) -> None:
        """Pause or continue around a bucketed update; a failure names the server, the call and the version."""
        try:
            await self.http.post(path, body)
        except (EngineHTTPError, EngineRequestError, TimeoutError) as e:
            raise WeightSyncFailed(self.http.base_url, path, version, e) from e

    async def pause(self) -> None:
        """``/pause_generation`` with ``pause_mode``."""
        await self.http.post("/pause_generation", {"mode": self.pause_mode})

    async def resume(self) -> None:
        """``/continue_generation``."""
        await self.http.post("/continue_generation", {})

    async def close(self) -> None:
        """Close the HTTP client and leave the trainer's end of the weight-update group if this process holds it
        (a group left behind keeps its name taken in the process: the next join under it fails)."""
        if self.trainer_group is not None:
            group, self.trainer_group, self.broadcast = self.trainer_group, None, None
            await asyncio.to_thread(dist.destroy_process_group, group)
        await self.http.aclose()

    async def _checked(self, path: str, body: dict[str, Any], **overrides: Any) -> None:
        answer = await self.http.request("POST", path, body, **overrides)
        if isinstance(answer, dict) and answer.get("success") is False:
            raise EngineRequestError(f"SGLang {self.http.base_url}{path} refused: {answer.get('message', answer)}")

    async def _collective(self, path: str, version: int | None, body: dict[str, Any]) -> None:
        """A call the server answers only after a collective with the trainer: sent once, ``update_timeout_sec``.

        Raises:
            WeightSyncFailed: refused, failed or timed out (names the server, ``path`` and ``version``).
        """
        try:
            await self._checked(path, body, timeout_sec=self.update_timeout_sec, max_retries=0)
        except (EngineHTTPError, EngineRequestError, TimeoutError) as e:
            raise WeightSyncFailed(self.http.base_url, path, version, e) from e
