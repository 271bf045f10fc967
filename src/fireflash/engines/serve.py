"""FireFlash's SGLang-compatible server: any in-process ``Engine`` behind SGLang's native HTTP API.

Why: the Ray backend drives rollout engines that are servers and pushes new weights into them through a
weight-update group (RECIPE.md §1). This server lets a CPU ``LocalEngine`` be such a server (in its own
process or on another node), and lets CI test the whole server path with the real ``SGLangEngine`` client,
weight sync over a real gloo group included.

Run:

    fireflash serve smollm2-135m --port 30000 [-c CONFIG] [engine.max_batch_size=8 ...]
    python -m fireflash.cli.serve MODEL --port 30000 [max_batch_size=8 ...]        # EngineConfig fields
    EngineServer(engine).start() → "http://127.0.0.1:PORT"                          # in process (tests, actors)

The subset of SGLang's native API it implements, with exactly the shapes ``SGLangEngine`` sends and reads:

    POST /generate                         one prompt as ``input_ids`` → output_ids, meta_info (finish_reason,
                                           prompt/completion/cached tokens, weight_version, output_token_logprobs
                                           [[lp, id, null]], output_top_logprobs [[[lp, id, null]]], e2e_latency)
    GET  /health → {}                      GET /get_model_info → {"model_path", "weight_version", "is_generation"}
    POST /update_weights_from_disk         an HF directory of safetensors, tagged weight_version
    POST /init_weights_update_group        join a trainer's group as rank ``rank_offset`` (in a worker thread: the
                                           call blocks until every member joins; /generate keeps being served)
    POST /update_weights_from_distributed  receive exactly the tensors the call lists, in order, by
                                           ``dist.broadcast(src=0)`` into ``torch.empty(shape, dtype)``, as SGLang
                                           does; install them with the call that carries ``weight_version``
    POST /destroy_weights_update_group     leave a group and forget it
    POST /pause_generation, /continue_generation

What it does not do: text prompts (no tokenizer: send ``input_ids``), batched requests (a list of prompts, or
``n`` > 1: send one request per prompt), streaming, prompt logprobs (``logprob_start_len`` other than -1),
sampling features FireFlash engines lack (top_k, min_p, penalties, stop strings, grammars: a non-neutral value
is refused with 400 naming the field), ``load_format`` buckets, LoRA, multimodal input. Error bodies are SGLang's
(``http_server.py``): weight failures answer 400 ``{"success": false, "message"}``; a bad body (``/generate``,
``/pause_generation``) answers 400 with SGLang's ``ErrorResponse`` at the top level (``validation_exception_handler``:
``{"object": "error", "message", "type", "param", "code"}``; FireFlash fills ``param`` with the field path, which
``http.JSONClient`` names); a request the engine refuses answers 400 ``{"error": {"message"}}``
(``_create_error_response``, as for SGLang's tokenizer manager's ``ValueError``).

Where it behaves as SGLang (the client depends on each; recorded examples: tests/engines/contracts/):

* Stop handling (``schedule_batch.Req._check_token_based_finish``): with ``ignore_eos`` false a request stops at a
  ``stop_token_ids`` entry or at the model's EOS ids (``eos_token_ids``); with ``ignore_eos`` true it checks
  neither — stop_token_ids included — and runs to ``max_new_tokens``. The stop token is returned (``no_stop_trim``
  only trims text, and there is no text).
* Per-call tensor lists (``model_runner.update_weights_from_distributed``): each call allocates and receives
  exactly the tensors it names; a bucketed update is several calls.
* Pause 'abort', the default mode of SGLang's ``PauseGenerationReqInput`` (``io_struct.py``) and of this server
  (``tokenizer_manager.pause_generation``): every in-flight request ends at once with ``finish_reason``
  ``{"type": "abort"}``, and new ones wait until ``/continue_generation``.
* Pause 'retract' (``scheduler.py``: running requests go back to the waiting queue, their KV freed): on an engine with
  ``abort()`` (``LocalEngine``) each running request returns what it has sampled so far inside the server, waits
  for ``/continue_generation``, and samples the rest with its prompt and those tokens prefilled again on the
  weights then installed; its answer lists ``meta_info.weight_versions`` spans (``{"version", "start", "end"}``)
  when two versions sampled it, and ``weight_version`` is the newest.
* Pause 'in_place' (``io_struct.PauseGenerationReqInput``: requests "stay in the event_loop, then continue generation
  after continue_generation with the old kv cache"): a ``LocalEngine`` stops between steps, its running requests
  keep their KV cache, and a weight update while paused hands them to the new weights
  (``LocalEngine.update_weights(..., in_place=True)``): after ``/continue_generation`` each samples its next token
  on the new weights over the KV the old ones wrote (not recomputed), and its answer lists ``weight_versions`` spans
  as under 'retract'.

Decisions where FireFlash engines differ from SGLang:

* ``no_stop_trim`` must be true (SGLang's default is false, so clients must send it, as ``SGLangEngine`` does):
  FireFlash engines always return the stop token.
* A partial update (a call without ``weight_version``) is received and kept; the call with ``weight_version``
  installs everything kept so far as that version. SGLang loads each call's tensors as they arrive: installing
  them together is stricter (no request sees half an update) and needs no pause around the buckets.
* ``return_logprob`` false omits the logprob fields; ``output_top_logprobs`` rows are empty when
  ``top_logprobs_num`` is 0. Logprobs are the engine's (log softmax(logits / T), before top-p).
* ``LocalEngine`` does not offer the KV of a turn paused in place across an update to its prefix cache (SGLang's
  radix cache keeps it unless flushed, and ``in_place`` refuses ``flush_cache`` while requests run); on an engine
  whose ``update_weights`` lacks ``in_place`` (``ScriptedEngine``) such turns finish on the weights they started
  with, and 'retract' on an engine without ``abort()`` does the same. Either way a caller must not wait for
  in-flight requests to return between pause and continue.
* Weight updates run pause → install → resume (``weight_sync.apply_between_turns``) unless the server was paused
  by ``/pause_generation``; then they install and leave it paused. ``flush_cache`` is accepted and ignored (a
  ``LocalEngine`` clears its prefix cache on every update); ``abort_all_requests: true`` is refused (nothing
  is aborted). ``weight_version`` is required and must be an integer (FireFlash versions are integers).
* One process can be a member of a group name only once (torch keys groups by name), so two servers in one
  process cannot join the same group; different groups are fine. Run one server per process (a Ray actor or
  ``launch_fireflash_server``) to put several servers in one group.
"""


from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fireflash.engines.serve_bodies import (
    _JSON,
    BadRequest,
    _bad_request,
    _Body,
    _DiskUpdate,
    _DistributedUpdate,
    _engine_error,
    _GroupName,
    _InitGroup,
    _joined,
    _parse_generate,
    _Pause,
    _refused,
    _stretches,
    _version,
    _version_spans,
)
from fireflash.engines.serve_state import _in_thread, _receive, _Service
from fireflash.engines.weight_sync import init_weight_update_group
from fireflash.protocols import Engine, GenerateRequest, GenerateResult


async def _json(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return await request.json()
    except ValueError as e:
        raise BadRequest((), f"the body is not JSON: {e}") from None


def build_app(
    engine: Engine, *, model_path: str = "", weight_sync_timeout_sec: float = 300.0, eos_token_ids: Sequence[int] = ()
) -> Starlette:
    """A Starlette app serving ``engine`` through SGLang's native API (module docstring for the subset).

    Run it on the event loop the engine's coroutines may use (``EngineServer`` does); concurrent /generate
    requests reach ``engine.generate`` concurrently, and the engine batches them.

    Args:
        engine: any ``protocols.Engine`` (``LocalEngine``; ``ScriptedEngine`` in tests).
        model_path: reported by /get_model_info.
        weight_sync_timeout_sec: a group member that does not join, or a broadcast that stalls, fails after this
            many seconds (the request then answers 400).
        eos_token_ids: the model's EOS ids, where a request without ``ignore_eos`` stops (``model_eos_ids``);
            () stops only at the request's ``stop_token_ids``.
    """
    service = _Service(engine, model_path, weight_sync_timeout_sec)
    eos_token_ids = [int(t) for t in eos_token_ids]

    async def generate(request: Request) -> JSONResponse:
        start = time.perf_counter()
        try:
            g, req = _parse_generate(await _json(request), eos_token_ids)
        except BadRequest as e:
            return _bad_request(e.loc, str(e))
        except ValidationError as e:
            err = e.errors()[0]
            return _bad_request(tuple(err["loc"]), err["msg"])
        pieces: list[GenerateResult] = []  # one per stretch sampled between retracts
        part = req
        while True:
            await service.resumed.wait()  # a paused server holds new requests until /continue_generation
            task = asyncio.ensure_future(engine.generate([part]))
            service.in_flight.add(task)
            try:
                (res,) = await task
            except asyncio.CancelledError:
                if task not in service.aborted:  # this handler was cancelled (the client went away)
                    raise
                # pause 'abort': SGLang ends the request with finish_reason abort (scheduler's abort_all)
                res = GenerateResult(request_id=req.request_id, token_ids=[], logprobs=[], topk_ids=[],
                                     topk_logprobs=[], finish_reason="abort", weight_version=engine.weight_version)
            except ValueError as e:  # LocalEngine: empty prompt, id outside the vocabulary, prompt too long
                return _engine_error(str(e))  # SGLang's answer to its tokenizer manager's ValueError
            except Exception as e:  # noqa: BLE001 - the client gets the engine's reason, not a bare 500
                from fireflash.engines.local import EngineClosed

                return _engine_error(f"{type(e).__name__}: {e}", 503 if isinstance(e, EngineClosed) else 500)
            finally:
                service.in_flight.discard(task)
                service.aborted.discard(task)
            pieces.extend(_stretches(res))  # one per version, when it went on across an in-place update
            left = part.params.max_new_tokens - len(res.token_ids)
            if not (task in service.retracted and res.finish_reason == "abort" and left > 0):
                break
            service.retracted.discard(task)
            # pause 'retract' (scheduler.py, retract_all: back to the waiting queue, KV freed): after
            # /continue_generation its prompt and the tokens sampled so far are prefilled again and it samples on,
            # on the weights installed meanwhile
            part = GenerateRequest(request_id=req.request_id, prompt_ids=part.prompt_ids + res.token_ids,
                                   params=part.params.model_copy(update={"max_new_tokens": left}))
        res = _joined(pieces)
        n = len(res.token_ids)
        finish: dict[str, Any] = {"type": res.finish_reason}
        if res.finish_reason == "stop" and n:
            finish["matched"] = res.token_ids[-1]
        elif res.finish_reason == "length":
            finish["length"] = n
        else:  # schedule_batch.FINISH_ABORT.to_json
            finish |= {"message": "Abort before prefill" if not n else "aborted by the engine", "status_code": None,
                       "err_type": None}
        meta: dict[str, Any] = {
            "id": req.request_id,
            "finish_reason": finish,
            "prompt_tokens": len(req.prompt_ids),
            "completion_tokens": n,
            "cached_tokens": pieces[0].n_cached_prompt_tokens,
            "weight_version": str(res.weight_version),
        }
        spans = _version_spans(pieces)  # a retracted or paused-in-place turn: which version sampled which tokens
        if len({span["version"] for span in spans}) > 1:
            meta["weight_versions"] = spans
        if g.return_logprob:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(res.logprobs, res.token_ids, strict=True)]
            meta["output_top_logprobs"] = [
                [[lp, t, None] for lp, t in zip(lps, ids, strict=True)]
                for lps, ids in zip(res.topk_logprobs, res.topk_ids, strict=True)
            ] if g.top_logprobs_num else [[] for _ in range(n)]
        meta["e2e_latency"] = time.perf_counter() - start
        return _JSON({"text": "", "output_ids": res.token_ids, "meta_info": meta})

    async def health(_: Request) -> JSONResponse:
        return _JSON({})

    async def model_info(_: Request) -> JSONResponse:
        return _JSON(
            {"model_path": service.model_path, "weight_version": str(engine.weight_version), "is_generation": True}
        )

    def weight_route(schema: type[_Body], handle: Callable[[Any], Awaitable[str]]) -> Callable:
        """A weight route: validate ``schema``, run ``handle`` → message; every failure answers 400
        ``{"success": false, "message"}`` (SGLang's shape; a 5xx would make the client retry a collective)."""

        async def route(request: Request) -> JSONResponse:
            try:
                body = schema.model_validate(await _json(request))
                message = await handle(body)
            except ValidationError as e:
                err = e.errors()[0]
                return _refused(f"{'.'.join(map(str, err['loc']))}: {err['msg']}")
            except Exception as e:  # noqa: BLE001 - reported to the client, as SGLang does
                return _refused(f"{type(e).__name__}: {e}")
            return _JSON({"success": True, "message": message, "num_paused_requests": 0})

        return route

    async def update_from_disk(body: _DiskUpdate) -> str:
        version = _version(body.weight_version)
        if body.abort_all_requests:
            raise BadRequest(("abort_all_requests",), "abort_all_requests is not supported: in-flight requests "
                             "are kept; /pause_generation with mode 'abort' first ends them")
        path = Path(body.model_path)
        if not path.is_dir():
            raise FileNotFoundError(f"model_path {str(path)!r} is not a directory on the server")
        await service.install(path, version)
        return f"Succeeded to update model weights (version {version})."

    async def init_group(body: _InitGroup) -> str:
        name = body.group_name
        service.groups.check_free(name)
        service.groups.joining.add(name)
        try:
            group = await _in_thread(
                init_weight_update_group, body.master_address, body.master_port, body.rank_offset, body.world_size,
                body.backend, name, service.timeout_sec,
            )
        finally:
            service.groups.joining.discard(name)
        service.groups.groups[name] = (group, body.backend)
        return f"Joined weight-update group {name!r} as rank {body.rank_offset} of {body.world_size}."

    async def update_from_distributed(body: _DistributedUpdate) -> str:
        if body.abort_all_requests:
            raise BadRequest(("abort_all_requests",), "abort_all_requests is not supported: in-flight requests "
                             "are kept; /pause_generation with mode 'abort' first ends them")
        version = None if body.weight_version is None else _version(body.weight_version)
        group, backend = service.groups.get(body.group_name)
        if not len(body.names) == len(body.dtypes) == len(body.shapes):
            raise BadRequest(("names",), f"names, dtypes and shapes differ in length ({len(body.names)}, "
                             f"{len(body.dtypes)}, {len(body.shapes)})")
        specs = []
        for name, dtype_name, shape in zip(body.names, body.dtypes, body.shapes, strict=True):
            dtype = getattr(torch, dtype_name, None)
            if not isinstance(dtype, torch.dtype) or any(d < 0 for d in shape):
                raise BadRequest(("dtypes",), f"{name}: dtype {dtype_name!r} / shape {shape} is not a torch tensor's")
            specs.append((name, dtype, tuple(shape)))
        async with service.groups.lock(body.group_name):
            state = await _in_thread(_receive, specs, group, "cuda" if backend == "nccl" else "cpu")
        staged = service.staged.setdefault(body.group_name, {})
        staged.update(state)
        n_bytes = sum(math.prod(s) * d.itemsize for _, d, s in specs)
        received = f"Received {len(specs)} tensors ({n_bytes / 2**20:.1f} MiB) over {body.group_name!r}"
        if version is None:
            return f"{received}; kept until a call with weight_version installs them ({len(staged)} kept)."
        del service.staged[body.group_name]
        await service.install(staged, version)
        return f"{received}; installed {len(staged)} tensors as version {version}."

    async def destroy_group(body: _GroupName) -> str:
        group, _ = service.groups.get(body.group_name)
        async with service.groups.lock(body.group_name):
            await _in_thread(dist.destroy_process_group, group)
            del service.groups.groups[body.group_name]
        return f"Left weight-update group {body.group_name!r}."

    async def pause(request: Request) -> JSONResponse:
        try:
            mode = _Pause.model_validate(await _json(request)).mode
        except (BadRequest, ValidationError) as e:
            return _bad_request(("mode",), str(e))
        if mode not in ("abort", "retract", "in_place"):  # io_struct.PauseGenerationReqInput.__post_init__
            return _bad_request(("mode",), f"Invalid mode: {mode!r}. Expected one of ['abort', 'retract', 'in_place'].")
        service.resumed.clear()
        service.paused, service.pause_mode = True, mode
        if mode == "abort":  # tokenizer_manager.pause_generation: abort every request, return once none runs
            aborted = list(service.in_flight)
            service.aborted.update(aborted)
            for task in aborted:
                task.cancel()
            await asyncio.gather(*aborted, return_exceptions=True)
        elif mode == "retract" and hasattr(engine, "abort"):
            # SGLang retracts every running request to its waiting queue: each returns what it sampled so far here
            # and /generate samples the rest after /continue_generation (the loop above)
            service.retracted.update(service.in_flight)
            await engine.abort()
        # 'in_place' (and 'retract' on an engine without abort): requests keep their KV; a weight update while paused
        # hands them to the new weights (_Service.install), as SGLang's scheduler does by leaving them in its batch
        await engine.pause()
        return _JSON({"message": "Generation paused successfully."})

    async def resume(_: Request) -> JSONResponse:
        await engine.resume()
        service.paused, service.pause_mode = False, ""
        service.resumed.set()
        return _JSON({"message": "Generation continued successfully."})

    app = Starlette(
        routes=[
            Route("/generate", generate, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/get_model_info", model_info, methods=["GET"]),
            Route("/update_weights_from_disk", weight_route(_DiskUpdate, update_from_disk), methods=["POST"]),
            Route("/init_weights_update_group", weight_route(_InitGroup, init_group), methods=["POST"]),
            Route(
                "/update_weights_from_distributed",
                weight_route(_DistributedUpdate, update_from_distributed),
                methods=["POST"],
            ),
            Route("/destroy_weights_update_group", weight_route(_GroupName, destroy_group), methods=["POST"]),
            Route("/pause_generation", pause, methods=["POST"]),
            Route("/continue_generation", resume, methods=["POST"]),
        ]
    )
    app.state.service = service
    return app


class EngineServer:
    """``build_app(engine)`` under uvicorn in a background thread with its own event loop (the engine's
    coroutines run on that loop). Usable inside a Ray actor: it installs no signal handlers.

    Args:
        engine: any ``protocols.Engine``; the server owns it from ``start()`` on (``close()`` closes it).
        host: interface to listen on ('0.0.0.0' for every interface).
        port: TCP port; 0 picks a free one (``url`` reports it).
        model_path: reported by /get_model_info.
        weight_sync_timeout_sec / eos_token_ids: see ``build_app``.
        log_level: uvicorn's ('warning' keeps the access log quiet).
    """

    def __init__(
        self,
        engine: Engine,
        host: str = "127.0.0.1",
        port: int = 0,
        model_path: str = "",
        *,
        weight_sync_timeout_sec: float = 300.0,
        eos_token_ids: Sequence[int] = (),
        log_level: str = "warning",
    ) -> None:
        self.engine, self.host, self.port = engine, host, port
        self.app = build_app(engine, model_path=model_path, weight_sync_timeout_sec=weight_sync_timeout_sec,
                             eos_token_ids=eos_token_ids)
        self.log_level = log_level
        self.url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None

    def start(self, timeout_sec: float = 30.0) -> str:
        """Listen, and return the base URL once connections are accepted (127.0.0.1 stands for 0.0.0.0).

        Raises:
            OSError: the port is taken.
            RuntimeError: already started, or uvicorn did not come up within ``timeout_sec`` seconds.
        """
        import uvicorn

        if self._thread is not None:
            raise RuntimeError("EngineServer.start called twice; build another server")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level=self.log_level, access_log=False, lifespan="off", timeout_graceful_shutdown=5
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, args=(sock,), name="fireflash-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_sec
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"EngineServer on {self.host}:{self.port} did not start: {self._failure!r}")
            time.sleep(0.01)
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{shown}:{self.port}"
        return self.url

    def _run(self, sock: socket.socket) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._server.serve(sockets=[sock]))
        except BaseException as e:  # noqa: BLE001 - start() reports it
            self._failure = e
        finally:
            self._loop.close()
            sock.close()

    def alive(self) -> bool:
        """Whether the server thread still runs."""
        return self._thread is not None and self._thread.is_alive()

    def close(self, timeout_sec: float = 30.0) -> None:
        """Leave every weight-update group, close the engine (its running requests end with 'abort'), stop uvicorn."""
        if self._thread is None or not self._thread.is_alive() or self._loop is None:
            return
        service: _Service = self.app.state.service
        try:
            asyncio.run_coroutine_threadsafe(service.close(), self._loop).result(timeout_sec)
        finally:
            self._server.should_exit = True
            self._thread.join(timeout_sec)

