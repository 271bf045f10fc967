"""JSON over HTTP for the SGLang and vLLM clients: retries, backoff, timeouts and readable errors.

Connection errors and 5xx answers are retried with exponential backoff (``backoff_sec``, doubling);
a 4xx answer is the caller's mistake and raises at once, naming the request field the server blamed
(FastAPI's ``detail[].loc`` or OpenAI's ``error.param``); a request that runs past ``timeout_sec`` raises
``EngineTimeout`` without a retry (the server may still be generating; a retry would double the load).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx


class EngineHTTPError(RuntimeError):
    """The engine server failed (5xx after all retries, or unreachable)."""


class EngineRequestError(ValueError):
    """The engine server rejected a request (4xx); the message names the field it blamed."""


class EngineTimeout(TimeoutError):
    """A request exceeded its per-request timeout."""


class WeightVersionMissing(EngineHTTPError):
    """A server's result does not say which weight version sampled it (the field is absent or not an integer).

    Raised instead of guessing: a result tagged with a version it was not sampled by is trained on with the
    wrong staleness (RECIPE.md §1). Like any engine error it costs the attempt one try, not the run.
    """


class WeightSyncFailed(RuntimeError):
    """A weight update of an engine server failed; the message names the server, the call, the weight version
    and whether it timed out or failed.

    Attributes:
        url: the server's base URL.
        call: the endpoint (``/update_weights_from_distributed``) or ``trainer broadcast`` (the trainer's half).
        version: the weight version being installed (None while joining the group).
        timed_out: no answer within the update's timeout (as opposed to an error or a refusal).
    """

    def __init__(self, url: str, call: str, version: int | None, cause: BaseException) -> None:
        self.url, self.call, self.version = url, call, version
        self.timed_out = isinstance(cause, TimeoutError)
        what = f"weight version {version}" if version is not None else "joining the weight-update group"
        how = "timed out" if self.timed_out else "failed"
        super().__init__(f"engine server {url}: {call} ({what}) {how}: {type(cause).__name__}: {cause}")


def _server_message(body: Any) -> str:
    """The reason in an error body, from either engine (issue 31):

    * SGLang (``http_server.py``): ``{"message": ...}`` at the top level (its ``ErrorResponse`` for a body that fails
      validation; ``{"success": false, "message"}`` from weight routes), ``{"error": {"message"}}`` for a request its
      tokenizer manager refuses (``_create_error_response``);
    * vLLM: ``{"error": {"message", "type", "param", "code"}}`` (``ErrorResponse`` of the OpenAI routes),
      ``{"detail": "..."}`` (FastAPI's ``HTTPException`` from its RL routes, ``serve/dev/rlhf/api_router.py``);
    * FastAPI's validation list ``{"detail": [{"loc", "msg"}]}``;

    else the body itself (shortened)."""
    if isinstance(body, dict):
        if isinstance(body.get("message"), str):
            return body["message"]
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list) and detail and isinstance(detail[0], dict) and isinstance(detail[0].get("msg"), str):
            return detail[0]["msg"]
    return str(body)[:400]


def _blamed_field(body: Any) -> str:
    """The request field a 4xx body points at (FastAPI's ``detail[].loc``, OpenAI's ``error.param`` or the ``param`` of
    SGLang's top-level ``ErrorResponse``), or ''."""
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, list) and detail and isinstance(detail[0], dict) and "loc" in detail[0]:
            return ".".join(str(p) for p in detail[0]["loc"] if p != "body")
        error = body.get("error")
        if isinstance(error, dict) and error.get("param"):
            return str(error["param"])
        if body.get("object") == "error" and body.get("param"):
            return str(body["param"])
    return ""


class JSONClient:
    """A small async JSON client bound to one server.

    Args:
        base_url: e.g. ``http://127.0.0.1:30000``.
        timeout_sec: per-request timeout, seconds.
        max_retries: retries after the first attempt on connection errors and 5xx.
        backoff_sec: delay before the first retry, seconds; doubles each retry.
        transport: an httpx transport (tests pass ``httpx.MockTransport``); None uses the network.
    """

    def __init__(
        self,
        base_url: str,
        timeout_sec: float = 600.0,
        max_retries: int = 3,
        backoff_sec: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_sec = timeout_sec
        self.max_retries = max_retries
        self.backoff_sec = backoff_sec
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # created lazily inside the running loop; an AsyncClient must not cross event loops
        if self._client is None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            self._client = httpx.AsyncClient(
                base_url=self.base_url, transport=self._transport, limits=limits, timeout=None
            )
        return self._client

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | Callable[[int], Mapping[str, Any]] | None = None,
        params: Mapping[str, Any] | None = None,
        *,
        timeout_sec: float | None = None,
        max_retries: int | None = None,
    ) -> Any:
        """Send one request; return the decoded JSON body (None when empty).

        ``timeout_sec`` / ``max_retries`` override the client's for this request (a weight update waits longer
        than a turn, and a collective one must never be sent twice). ``body`` may be a function of the try number
        (0, 1, ...) that returns the body, e.g. a fresh request id per try.

        Raises:
            EngineRequestError: 4xx (not retried).
            EngineHTTPError: 5xx or connection failure after ``max_retries`` retries.
            EngineTimeout: no complete answer within ``timeout_sec``.
        """
        timeout_sec = self.timeout_sec if timeout_sec is None else timeout_sec
        max_retries = self.max_retries if max_retries is None else max_retries
        last: str = ""
        for attempt in range(max_retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_sec * 2 ** (attempt - 1))
            try:
                response = await self._http().request(
                    method, path, json=body(attempt) if callable(body) else body, params=params,
                    timeout=httpx.Timeout(timeout_sec),
                )
            except httpx.TimeoutException as e:
                raise EngineTimeout(
                    f"{method} {self.base_url}{path}: no answer within {timeout_sec} s ({type(e).__name__})"
                ) from e
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}: {response.text[:300]}"
                continue
            if response.status_code >= 400:
                try:
                    payload = response.json()
                except json.JSONDecodeError:
                    payload = response.text
                blamed = _blamed_field(payload)
                where = f" field {blamed!r}" if blamed else ""
                raise EngineRequestError(
                    f"{method} {self.base_url}{path} rejected{where} (HTTP {response.status_code}): "
                    f"{_server_message(payload)}"
                )
            return response.json() if response.content else None
        raise EngineHTTPError(
            f"{method} {self.base_url}{path} failed after {max_retries + 1} attempts; last error: {last}"
        )

    async def post(
        self, path: str, body: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        return await self.request("POST", path, body, params)

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def flags_from_args(args: Mapping[str, Any]) -> list[str]:
    """Server flags from a config dict, verbatim (STYLE.md 6): ``{"speculative_algorithm": "EAGLE"}`` →
    ``["--speculative-algorithm", "EAGLE"]``; True → bare flag; False/None → omitted; a list repeats values;
    a dict becomes JSON (vLLM's ``--weight-transfer-config``)."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-") if not key.startswith("--") else key
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def die_with_parent_hook() -> None:
    """A ``Popen(preexec_fn=...)`` that makes the kernel SIGKILL the child when the thread that started it exits
    (Linux ``PR_SET_PDEATHSIG``; elsewhere nothing). Start servers from a thread that lives as long as their owner
    (a sync Ray actor's constructor and methods run on its main thread), so a killed actor leaves no server holding
    its GPUs behind."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def start_server(
    command: list[str],
    port: int,
    timeout_sec: float,
    *,
    host: str = "127.0.0.1",
    log_path: Any = None,
    env: Mapping[str, str] | None = None,
    die_with_parent: bool = False,
) -> subprocess.Popen:
    """Run a server ``command`` listening on ``host:port``, wait for its ``/health``, and return the process (the
    caller terminates it). One that never becomes healthy is killed here, so it never holds its GPUs.

    Args:
        log_path: the child's stdout and stderr; None discards them.
        die_with_parent: the kernel kills the server when the calling thread's process dies (``die_with_parent_hook``).

    Raises:
        EngineHTTPError: the server exited or did not become healthy in time (see its log).
    """
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    process = subprocess.Popen(command, env=None if env is None else dict(env), stdout=log, stderr=subprocess.STDOUT,
                               preexec_fn=die_with_parent_hook if die_with_parent else None)
    local = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # every interface: ask on loopback
    try:
        wait_until_healthy(f"http://{local}:{port}", process, timeout_sec)
    except BaseException:
        process.kill()
        raise
    return process


def wait_until_healthy(
    url: str, process: subprocess.Popen | None, timeout_sec: float, path: str = "/health"
) -> None:
    """Poll ``url + path`` until HTTP 200.

    Raises:
        EngineHTTPError: the process exited, or no 200 within ``timeout_sec``.
    """
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise EngineHTTPError(
                f"server process exited with code {process.returncode} before {url} became healthy"
            )
        try:
            if httpx.get(url.rstrip("/") + path, timeout=5.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    raise EngineHTTPError(f"{url}{path} not healthy within {timeout_sec} s")
