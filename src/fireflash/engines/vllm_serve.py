"""A vLLM-faithful stand-in server: any in-process ``Engine`` behind vLLM's completion and RL weight-transfer routes.

Why (issue 31): ``VLLMEngine`` and ``engines/vllm_transfer.py`` must meet a server that behaves as vLLM does on
every point they depend on, in CI, without a GPU. Each behaviour below imitates vLLM 0.33 (main as of 2026-11) and
names the file it comes from; ``tests/engines/contracts/vllm_0.33/`` records the shapes.

    GET  /health, /v1/models, /weight_info, /is_paused, /get_world_size
    POST /v1/completions                 token-id prompts only (no tokenizer here)
    POST /pause?mode=abort|wait|keep, /resume
    POST /init_weight_transfer_engine, /start_weight_update, /update_weights, /finish_weight_update

Imitated, with the source:

* Sampling defaults (``openai/completion/protocol.py``, ``CompletionRequest.to_sampling_params``): each of
  temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty and frequency_penalty left unset (or null)
  in a request comes from the server's defaults: ``generation_config.json`` of the model (``--generation-config
  auto``; ``config/model.py`` ``get_diff_sampling_param`` reads repetition_penalty, temperature, top_k, top_p, min_p,
  max_new_tokens) or ``default_sampling_params``. FireFlash engines sample the full softmax only, so an effective
  value that is not neutral is refused with 400 naming the field and where it came from, where vLLM would
  silently sample with it.
* Stops (``v1/core/sched/utils.py`` ``check_stop``; ``sampling_params.py`` ``update_from_generation_config``): a
  ``stop_token_ids`` hit always stops (``stop_reason`` = the id); EOS and ``generation_config.json``'s extra EOS
  ids stop unless ``ignore_eos`` (``stop_reason`` null). The stop token is returned in ``token_ids``.
* Log-probs (``--logprobs-mode processed_logprobs``, ``openai/completion/serving.py``): each position's
  ``top_logprobs`` holds the K best and the sampled token (K+1 entries when it is not among them), keys
  ``"token_id:N"`` (``return_tokens_as_token_ids``, required here: there is no tokenizer); ``logprobs`` above
  ``--max-logprobs`` (default 20) is a 400 with ``param: "logprobs"``. ``top_p < 1`` is refused: vLLM's processed
  log-probs are after top-p, a FireFlash engine's before.
* ``usage.prompt_tokens_details`` is ``{"cached_tokens"}`` only with ``--enable-prompt-tokens-details``, else null
  (``serving.py``).
* Pause (``serve/dev/rlhf/api_router.py``, ``pause_generation``): 'abort' (default) returns every in-flight request
  now with finish_reason 'abort' and the tokens sampled so far; 'wait' returns once they have finished; 'keep'
  freezes them until ``/resume``. Requests arriving while paused wait for ``/resume``.
* Weight transfer (``api_router.py``; ``rl_state_machine.py``; ``distributed/weight_transfer/nccl_engine.py``):
  without a weight-transfer config every weight route fails (500, "not configured"); ``init_info`` / ``update_info``
  missing → 400 ``{"detail"}``; ``/update_weights`` and ``/finish_weight_update`` without a preceding
  ``/start_weight_update``, or a second start, → 409; ``update_info.names`` / ``dtype_names`` / ``shapes`` of
  different lengths → 400; each tensor is received, in order, into ``torch.empty(shape, dtype)`` by a broadcast
  from rank 0; ``/finish_weight_update {"weight_version"}`` sets what ``/weight_info`` reports (null until then).

Where it differs, named: the group is FireFlash's gloo stand-in of vLLM's NCCL communicator
(``--weight-transfer-config '{"backend": "gloo"}'``, ``engines/vllm_transfer.py``), one worker (rank
``rank_offset``), no packed transfer (``packed: true`` refused); received tensors are installed at
``/finish_weight_update`` (vLLM loads each as it arrives; the same while paused, which the client is), and
``weight_version`` must be an integer (FireFlash versions are). Text prompts, ``n`` > 1, streaming, echo and
prompt log-probs are refused with 400 naming the field.

Run in process (tests): ``vllm_standin(engine, ...) → EngineServer`` (``.start()`` → URL, ``.close()``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fireflash.engines.serve import EngineServer
from fireflash.engines.serve_state import _in_thread
from fireflash.engines.vllm_transfer import gloo_broadcast, stateless_gloo_group
from fireflash.protocols import Engine, GenerateRequest, SamplingParams

# CompletionRequest._DEFAULT_SAMPLING_PARAMS (openai/completion/protocol.py): used when neither the request nor the
# server's defaults set a field
OPENAI_DEFAULTS: dict[str, float] = {
    "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "temperature": 1.0, "top_p": 1.0,
    "top_k": 0, "min_p": 0.0,
}
# the values at which a FireFlash engine samples what vLLM would (top_k: 0 and -1 both mean off in vLLM)
_NEUTRAL: dict[str, tuple[float, ...]] = {
    "repetition_penalty": (1.0,), "presence_penalty": (0.0,), "frequency_penalty": (0.0,), "top_p": (1.0,),
    "top_k": (0, -1), "min_p": (0.0,),
}
# config/model.py get_diff_sampling_param: what --generation-config auto takes from generation_config.json
_GENERATION_CONFIG_FIELDS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")


def generation_defaults(model_dir: str | Path) -> tuple[dict[str, Any], list[int]]:
    """(default sampling params, EOS ids) from ``model_dir/generation_config.json``, as vLLM's
    ``--generation-config auto`` reads them (``max_new_tokens`` becomes ``max_tokens``); empty when absent."""
    path = Path(model_dir) / "generation_config.json"
    if not path.is_file():
        return {}, []
    raw = json.loads(path.read_text())
    defaults = {k: raw[k] for k in _GENERATION_CONFIG_FIELDS if raw.get(k) is not None}
    if "max_new_tokens" in defaults:
        defaults["max_tokens"] = defaults.pop("max_new_tokens")
    eos = raw.get("eos_token_id")
    return defaults, [eos] if isinstance(eos, int) else list(eos or [])


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    """vLLM's OpenAI error body (``serve/exception_handling``): ``{"error": {message, type, param, code}}``."""
    kind = {400: "BadRequestError", 404: "NotFoundError", 409: "ConflictError"}.get(status, "InternalServerError")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status)


def _detail(status: int, message: str) -> JSONResponse:
    """FastAPI's ``HTTPException`` body, which the RL routes raise: ``{"detail": message}``."""
    return JSONResponse({"detail": message}, status)


class _Refused(ValueError):
    def __init__(self, param: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.status = param, status


class _State:
    """What the routes share: the engine, pause state, requests in flight, the weight-transfer group."""

    def __init__(self, engine: Engine, transfer: Mapping[str, Any] | None, timeout_sec: float) -> None:
        self.engine, self.transfer, self.timeout_sec = engine, transfer, timeout_sec
        self.paused = False
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.inflight: set[asyncio.Task[Any]] = set()
        self.group: Any = None
        self.updating = False
        self.pending: dict[str, torch.Tensor] = {}
        self.weight_version: str | None = None

    async def close(self) -> None:
        self.group = None
        close = getattr(self.engine, "close", None)
        if close is not None:
            await close()


def _sampling(body: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Each field: the request's, else the server default's, else OpenAI's (``to_sampling_params``); refuses one
    a FireFlash engine cannot honour."""
    out = {}
    for name, openai_default in OPENAI_DEFAULTS.items():
        if body.get(name) is not None:
            value, source = body[name], "the request"
        elif name in defaults:
            value, source = defaults[name], "the server's defaults (generation_config.json)"
        else:
            value, source = openai_default, "OpenAI's default"
        if name in _NEUTRAL and value not in _NEUTRAL[name]:
            raise _Refused(name, f"{name} = {value!r} (from {source}): this stand-in samples the full softmax only; "
                           f"vLLM would sample with it. Send {name} = {_NEUTRAL[name][0]!r} explicitly")
        out[name] = value
    return out


def build_vllm_app(
    engine: Engine,
    *,
    served_model_name: str = "model",
    default_sampling_params: Mapping[str, Any] | None = None,
    eos_token_ids: Sequence[int] = (),
    max_logprobs: int = 20,
    weight_transfer_config: Mapping[str, Any] | None = None,
    enable_prompt_tokens_details: bool = False,
    weight_sync_timeout_sec: float = 300.0,
) -> Starlette:
    """A Starlette app serving ``engine`` through vLLM's routes (the module docstring lists them and their sources).

    Args:
        engine: any ``protocols.Engine`` (``LocalEngine``); ``abort()`` is used for pause mode 'abort' when it has one.
        served_model_name: ``--served-model-name``; a request naming another model gets 404.
        default_sampling_params: the server's defaults (``generation_defaults(model_dir)[0]``).
        eos_token_ids: stop ids unless ``ignore_eos`` (``generation_defaults(model_dir)[1]``).
        max_logprobs: ``--max-logprobs``.
        weight_transfer_config: ``--weight-transfer-config``; None: every weight route fails, as in vLLM.
        enable_prompt_tokens_details: ``--enable-prompt-tokens-details``.
        weight_sync_timeout_sec: a member that does not join, or a broadcast that stalls, fails after this long.
    """
    state = _State(engine, weight_transfer_config, weight_sync_timeout_sec)
    defaults = dict(default_sampling_params or {})

    async def body_of(request: Request) -> Any:
        raw = await request.body()
        return json.loads(raw) if raw else {}

    async def completions(request: Request) -> JSONResponse:
        try:
            body = await body_of(request)
            req, stops = _parse(body)
        except _Refused as e:
            return _error(e.status, str(e), e.param)
        except ValueError as e:
            return _error(400, f"the body is not JSON: {e}")
        await state.resumed.wait()  # a paused engine holds new requests until /resume
        task = asyncio.ensure_future(engine.generate([req]))
        state.inflight.add(task)
        try:
            (res,) = await task
        except ValueError as e:  # LocalEngine: token id outside the vocabulary, prompt too long
            return _error(400, str(e), "prompt")
        finally:
            state.inflight.discard(task)
        k = body.get("logprobs")
        top_rows = []
        for tok, lp, ids, lps in zip(res.token_ids, res.logprobs, res.topk_ids, res.topk_logprobs, strict=True):
            row = {f"token_id:{i}": v for i, v in zip(ids[:k], lps[:k], strict=True)}
            row[f"token_id:{tok}"] = lp  # vLLM adds the sampled token to the K best
            top_rows.append(row)
        stop_reason = res.token_ids[-1] if res.finish_reason == "stop" and res.token_ids[-1] in stops else None
        choice: dict[str, Any] = {
            "index": 0, "text": "", "finish_reason": res.finish_reason, "stop_reason": stop_reason,
            "token_ids": res.token_ids if body.get("return_token_ids") else None,
            "logprobs": None if k is None else {
                "text_offset": [0] * len(res.token_ids),
                "token_logprobs": res.logprobs,
                "tokens": [f"token_id:{t}" for t in res.token_ids],
                "top_logprobs": top_rows,
            },
        }
        n_prompt, n_out = len(req.prompt_ids), len(res.token_ids)
        usage: dict[str, Any] = {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                                 "total_tokens": n_prompt + n_out, "prompt_tokens_details": None}
        if enable_prompt_tokens_details and res.n_cached_prompt_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": res.n_cached_prompt_tokens}
        return JSONResponse({"id": f"cmpl-{req.request_id}", "object": "text_completion", "created": int(time.time()),
                             "model": served_model_name, "choices": [choice], "usage": usage})

    def _parse(body: Any) -> tuple[GenerateRequest, set[int]]:
        if not isinstance(body, dict):
            raise _Refused("body", "the body must be a JSON object")
        if body.get("model") is not None and body["model"] != served_model_name:
            raise _Refused("model", f"The model `{body['model']}` does not exist.", 404)
        prompt = body.get("prompt")
        if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) and t >= 0 for t in prompt)):
            raise _Refused("prompt", "prompt must be a non-empty list of token ids (this stand-in has no tokenizer)")
        for name, neutral in (("n", 1), ("stream", False), ("echo", False), ("prompt_logprobs", None),
                              ("use_beam_search", False)):
            if body.get(name, neutral) not in (neutral, None):
                raise _Refused(name, f"{name} = {body[name]!r} is not supported by this stand-in")
        sampling = _sampling(body, defaults)
        k = body.get("logprobs")
        if k is not None:
            if not isinstance(k, int) or k < 0:
                raise _Refused("logprobs", "`logprobs` must be a positive value or -1.")
            if k > max_logprobs:
                raise _Refused("logprobs", f"Requested sample logprobs of {k}, which is greater than max allowed: "
                               f"{max_logprobs}")
            if not body.get("return_tokens_as_token_ids"):
                raise _Refused("return_tokens_as_token_ids", "send return_tokens_as_token_ids: true (no tokenizer)")
        max_tokens = body.get("max_tokens") if body.get("max_tokens") is not None else defaults.get("max_tokens", 16)
        stops = set(body.get("stop_token_ids") or []) | set(defaults.get("stop_token_ids") or [])
        all_stops = stops | (set() if body.get("ignore_eos") else set(eos_token_ids))
        params = SamplingParams(temperature=float(sampling["temperature"]), top_p=1.0, max_new_tokens=int(max_tokens),
                                stop_token_ids=sorted(all_stops), n_top_logprobs=k or 0, seed=body.get("seed"))
        rid = str(body.get("request_id") or uuid.uuid4().hex)
        return GenerateRequest(request_id=rid, prompt_ids=prompt, params=params), stops

    async def pause(request: Request) -> JSONResponse:
        mode = request.query_params.get("mode", "abort")
        if mode not in ("abort", "wait", "keep"):
            return _detail(422, f"mode {mode!r}: one of 'abort', 'wait', 'keep'")
        state.resumed.clear()
        state.paused = True
        if mode == "wait" and state.inflight:
            await asyncio.wait(list(state.inflight))
        await engine.pause()
        if mode == "abort" and hasattr(engine, "abort"):
            await engine.abort()
        return JSONResponse({"status": "paused"})

    async def resume(_: Request) -> JSONResponse:
        await engine.resume()
        state.paused = False
        state.resumed.set()
        return JSONResponse({"status": "resumed"})

    def transfer_backend() -> str:
        if state.transfer is None:
            raise _Refused("weight_transfer_config", "Weight transfer not configured: start the server with "
                           "--weight-transfer-config", 500)
        backend = state.transfer.get("backend", "nccl")
        if backend != "gloo":
            raise _Refused("weight_transfer_config", f"backend {backend!r}: this stand-in receives over 'gloo' only "
                           "(engines/vllm_transfer.py)", 500)
        return backend

    async def init_transfer(request: Request) -> JSONResponse:
        body = await body_of(request)
        info = body.get("init_info") if isinstance(body, dict) else None
        if info is None:
            return _detail(400, "Missing 'init_info' in request body")
        try:
            transfer_backend()
            state.group = await _in_thread(stateless_gloo_group, info["master_address"], int(info["master_port"]),
                                           int(info["rank_offset"]), int(info["world_size"]), state.timeout_sec)
        except _Refused as e:
            return _error(e.status, str(e), e.param)
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            return _error(500, f"{type(e).__name__}: {e}")
        return JSONResponse({"message": "Weight transfer initialized"})

    async def start_update(_: Request) -> JSONResponse:
        if state.updating:
            return _detail(409, "start_weight_update called while a weight update is already in progress.  Call "
                           "POST /finish_weight_update first.")
        state.updating, state.pending = True, {}
        return JSONResponse({"message": "Weight update started"})

    async def update(request: Request) -> JSONResponse:
        body = await body_of(request)
        info = body.get("update_info") if isinstance(body, dict) else None
        if info is None:
            return _detail(400, "Missing 'update_info' in request body")
        if not state.updating:
            return _detail(409, "update_weights requires a preceding start_weight_update. Call POST "
                           "/start_weight_update first.")
        try:
            transfer_backend()
            if state.group is None:
                raise _Refused("init_info", "NCCL weight transfer not initialized. Call init_transfer_engine() first.",
                               500)
            names, dtypes, shapes = info["names"], info["dtype_names"], info["shapes"]
            if not len(names) == len(dtypes) == len(shapes):
                raise _Refused("update_info", f"`dtype_names` and `shapes` should be of the same size as `names`: got "
                               f"{len(dtypes)}, {len(shapes)} and {len(names)}")
            if info.get("packed"):
                raise _Refused("update_info.packed", "packed transfer is vLLM's NCCL path; this stand-in takes one "
                               "broadcast per tensor")
            specs = [(n, getattr(torch, d), tuple(s)) for n, d, s in zip(names, dtypes, shapes, strict=True)]
            state.pending.update(await _in_thread(_receive, specs, state.group))
        except _Refused as e:
            return _error(e.status, str(e), e.param)
        except (KeyError, TypeError, AttributeError, RuntimeError) as e:
            return _error(500, f"{type(e).__name__}: {e}")
        return JSONResponse({"message": "Weights updated"})

    async def finish_update(request: Request) -> JSONResponse:
        body = await body_of(request)
        version = body.get("weight_version") if isinstance(body, dict) else None
        if not state.updating:
            return _detail(409, "finish_weight_update called without a preceding start_weight_update.")
        if version is not None and not str(version).lstrip("-").isdigit():
            return _error(400, f"weight_version {version!r} must be an integer (FireFlash versions are)",
                          "weight_version")
        try:
            if state.pending:
                number = int(version) if version is not None else engine.weight_version
                await engine.update_weights(state.pending, number)
        except ValueError as e:  # WeightUpdateError: names or shapes that do not fit the model
            return _error(500, f"{type(e).__name__}: {e}")
        finally:
            state.updating, state.pending = False, {}
        if version is not None:
            state.weight_version = str(version)
        return JSONResponse({"message": "Weight update finished"})

    app = Starlette(routes=[
        Route("/health", lambda _: JSONResponse({}), methods=["GET"]),
        Route("/v1/models", lambda _: JSONResponse(
            {"object": "list", "data": [{"id": served_model_name, "object": "model", "max_model_len": None}]}),
            methods=["GET"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/pause", pause, methods=["POST"]),
        Route("/resume", resume, methods=["POST"]),
        Route("/is_paused", lambda _: JSONResponse({"is_paused": state.paused}), methods=["GET"]),
        Route("/get_world_size", lambda _: JSONResponse({"world_size": 1}), methods=["GET"]),
        Route("/weight_info", lambda _: JSONResponse({"weight_version": state.weight_version}), methods=["GET"]),
        Route("/init_weight_transfer_engine", init_transfer, methods=["POST"]),
        Route("/start_weight_update", start_update, methods=["POST"]),
        Route("/update_weights", update, methods=["POST"]),
        Route("/finish_weight_update", finish_update, methods=["POST"]),
    ])
    app.state.service = state  # EngineServer.close() closes it
    return app


def _receive(specs: list[tuple[str, torch.dtype, tuple[int, ...]]], group: Any) -> dict[str, torch.Tensor]:
    """Each tensor, in order, into ``torch.empty(shape, dtype)`` from rank 0 (``NCCLWeightTransferEngine.
    receive_weights``, unpacked)."""
    out = {}
    for name, dtype, shape in specs:
        out[name] = torch.empty(shape, dtype=dtype)
        gloo_broadcast(group, out[name])
    return out


def vllm_standin(engine: Engine, host: str = "127.0.0.1", port: int = 0, **app_args: Any) -> EngineServer:
    """An ``EngineServer`` (uvicorn in a thread) serving ``build_vllm_app(engine, **app_args)``; ``start()`` it."""
    server = EngineServer(engine, host, port)
    server.app = build_vllm_app(engine, **app_args)
    return server
