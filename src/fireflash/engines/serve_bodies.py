"""The request bodies of SGLang's native API that FireFlash's server accepts (SGLang's field names), and turning
a ``/generate`` body into a ``GenerateRequest``: fields FireFlash engines cannot honour are accepted only at their
neutral value, anything else is a ``BadRequest`` naming the field (module docstring of ``engines.serve``).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from fireflash.protocols import GenerateRequest, GenerateResult, SamplingParams

_CLIENT_TRY_SUFFIX = re.compile(r"-[0-9a-f]{8}$")  # SGLangEngine's fresh rid per try: request_id + "-" + 8 hex

# SGLang fields FireFlash engines cannot honour, accepted only at the value that switches them off (None too)
_NEUTRAL_SAMPLING: dict[str, tuple[Any, ...]] = {
    "top_k": (-1,),
    "min_p": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_new_tokens": (0,),
    "n": (1,),
    "stop": ("", []),
    "spaces_between_special_tokens": (True, False),  # text only: there is no text
}
_NEUTRAL_TOP: dict[str, tuple[Any, ...]] = {
    "stream": (False,),
    "return_text_in_logprobs": (True, False),  # the text slot of each logprob entry is null either way
    "return_hidden_states": (False,),
}


# ───────────────────────────── request bodies (SGLang's names) ─────────────────────────────


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Sampling(_Body):
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(128, ge=1)
    stop_token_ids: list[int] | None = None
    sampling_seed: int | None = None
    ignore_eos: bool = False
    no_stop_trim: bool = False
    skip_special_tokens: bool = True


class _Generate(_Body):
    input_ids: list[int] = Field(min_length=1)
    rid: str | None = None
    sampling_params: _Sampling = Field(default_factory=_Sampling)
    return_logprob: bool = False
    top_logprobs_num: int = Field(0, ge=0)
    logprob_start_len: int = -1


class _DiskUpdate(_Body):
    model_path: str
    weight_version: str | int
    flush_cache: bool = True
    abort_all_requests: bool = False


class _InitGroup(_Body):
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    group_name: str = "weight_update_group"
    backend: str = "nccl"


class _DistributedUpdate(_Body):
    names: list[str] = Field(min_length=1)
    dtypes: list[str]
    shapes: list[list[int]]
    group_name: str = "weight_update_group"
    weight_version: str | int | None = None  # SGLang's is optional: absent = a partial update (module docstring)
    flush_cache: bool = True
    abort_all_requests: bool = False
    load_format: None = None


class _GroupName(_Body):
    group_name: str = "weight_update_group"


class _Pause(_Body):
    mode: str = "abort"


class _JSON(JSONResponse):
    """JSON that keeps -inf logprobs (json.loads reads -Infinity back; Starlette's default refuses them)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=True, separators=(",", ":")).encode()


class BadRequest(ValueError):
    """A request body the server cannot serve; ``loc`` is the field path, e.g. ('sampling_params', 'top_k')."""

    def __init__(self, loc: tuple[Any, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _bad_request(loc: tuple[Any, ...], message: str) -> JSONResponse:
    """A body that fails validation, as SGLang answers it: 400 with its OpenAI-style ``ErrorResponse`` at the top level
    (``http_server.py`` ``validation_exception_handler``, which turns FastAPI's 422 ``{"detail"}`` into this;
    ``entrypoints/openai/protocol.py`` ``ErrorResponse``: object, message, type, param, code). SGLang leaves ``param``
    null; FireFlash puts the field path there (the same shape), which ``http.JSONClient`` names."""
    field = ".".join(map(str, loc))
    return _JSON({"object": "error", "message": f"{field}: {message}" if field else message, "type": "Bad Request",
                  "param": field or None, "code": 400}, status_code=400)


def _engine_error(message: str, status: int = 400) -> JSONResponse:
    """A request the engine refused, as SGLang answers a ``ValueError`` from its tokenizer manager:
    ``{"error": {"message"}}`` (``http_server.py`` ``_create_error_response``, 400; FireFlash answers an engine failure
    that is not the request's fault with 500 / 503, so the client retries it)."""
    return _JSON({"error": {"message": message}}, status_code=status)


def _refused(message: str) -> JSONResponse:
    return _JSON({"success": False, "message": message}, status_code=400)


def _check_neutral(extra: Mapping[str, Any] | None, neutral: Mapping[str, tuple[Any, ...]], where: tuple) -> None:
    for key, value in (extra or {}).items():
        if value is None or value is False or (key in neutral and value in neutral[key]):
            continue
        raise BadRequest((*where, key), f"{'.'.join(map(str, (*where, key)))} = {value!r} is not supported by "
                                        "FireFlash's server (module docstring of fireflash.engines.serve)")


def _parse_generate(body: Any, eos_token_ids: Sequence[int] = ()) -> tuple[_Generate, GenerateRequest]:
    """Validate a /generate body and map it to the engine's request; the engine stops where SGLang would
    (module docstring: stop handling).

    Raises:
        BadRequest / ValidationError: the field at fault.
    """
    if not isinstance(body, dict):
        raise BadRequest((), "the body must be a JSON object")
    if body.get("text") is not None:
        raise BadRequest(("text",), "text prompts are not supported (no tokenizer): send input_ids")
    ids = body.get("input_ids")
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        raise BadRequest(("input_ids",), "batched input_ids (a list of lists) are not supported: one request per prompt")
    g = _Generate.model_validate(body)
    _check_neutral({k: v for k, v in (g.model_extra or {}).items() if k != "text"}, _NEUTRAL_TOP, ())
    sp = g.sampling_params
    _check_neutral(sp.model_extra, _NEUTRAL_SAMPLING, ("sampling_params",))
    if not sp.no_stop_trim:
        raise BadRequest(("sampling_params", "no_stop_trim"), "FireFlash engines return the stop token: send "
                         "no_stop_trim: true")
    if g.logprob_start_len != -1:
        raise BadRequest(("logprob_start_len",), "prompt logprobs are not supported: send logprob_start_len: -1")
    params = SamplingParams(
        temperature=sp.temperature,
        top_p=sp.top_p,
        max_new_tokens=sp.max_new_tokens,
        stop_token_ids=_stops(sp, eos_token_ids),
        n_top_logprobs=g.top_logprobs_num,
        seed=sp.sampling_seed,
    )
    # the engine's id without SGLangEngine's per-try suffix: a LocalEngine seeds an unseeded request from its id, so
    # a run's samples stay reproducible although every HTTP try carries a fresh rid
    rid = _CLIENT_TRY_SUFFIX.sub("", g.rid) if g.rid is not None else uuid.uuid4().hex
    return g, GenerateRequest(request_id=rid, prompt_ids=g.input_ids, params=params)


def _stops(sp: _Sampling, eos_token_ids: Sequence[int]) -> list[int]:
    """The ids a request stops at, as SGLang's ``Req._check_token_based_finish`` decides: none with ``ignore_eos``
    (it returns before looking at stop_token_ids), else ``stop_token_ids`` and the model's EOS ids."""
    if sp.ignore_eos:
        return []
    stops = list(sp.stop_token_ids or [])
    return stops + [t for t in eos_token_ids if t not in stops]


def _version(value: str | int) -> int:
    text = str(value).strip()
    if not text.lstrip("-").isdigit():
        raise BadRequest(("weight_version",), f"weight_version {value!r} must be an integer (FireFlash versions are)")
    return int(text)



def _joined(pieces: list[GenerateResult]) -> GenerateResult:
    """One result from the stretches of a retracted (or paused in place) request: their tokens in order, the last
    one's finish and version (the server's; the spans tell which version sampled what)."""
    last = pieces[-1]
    return last.model_copy(update={
        "token_ids": [t for p in pieces for t in p.token_ids], "logprobs": [x for p in pieces for x in p.logprobs],
        "topk_ids": [t for p in pieces for t in p.topk_ids], "topk_logprobs": [x for p in pieces for x in p.topk_logprobs],
    })


def _version_spans(pieces: list[GenerateResult]) -> list[dict[str, Any]]:
    """``meta_info.weight_versions`` of a retracted (or paused in place) request: ``{"version", "start", "end"}`` per
    stretch that sampled tokens, output positions end-exclusive (the shape in
    contracts/sglang_0.5/generate_weight_versions.json)."""
    spans, start = [], 0
    for piece in pieces:
        if piece.token_ids:
            spans.append({"version": str(piece.weight_version), "start": start, "end": start + len(piece.token_ids)})
            start += len(piece.token_ids)
    return spans


def _stretches(res: GenerateResult) -> list[GenerateResult]:
    """``res`` cut where an in-place update handed it to newer weights (``local_step.SpannedResult.version_starts``),
    each stretch tagged with the version that sampled it; ``[res]`` for a result sampled by one version."""
    starts = getattr(res, "version_starts", None)
    if not starts:
        return [res]
    bounds = [(0, res.weight_version), *starts, (len(res.token_ids), -1)]
    return [
        res.model_copy(update={
            "token_ids": res.token_ids[a:b], "logprobs": res.logprobs[a:b], "topk_ids": res.topk_ids[a:b],
            "topk_logprobs": res.topk_logprobs[a:b], "weight_version": version,
        })
        for (a, version), (b, _) in pairwise(bounds)
    ]
