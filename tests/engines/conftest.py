"""Shared fixtures: the tiny tokenizer/model, and a teacher-forced reference forward pass."""

from __future__ import annotations

import pytest
import torch

from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.protocols import GenerateRequest, GenerateResult


@pytest.fixture(scope="session")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture
def tiny(tok):
    """A fresh tiny model per test (engines take ownership of their model)."""
    return build_tiny_model(len(tok))


def teacher_forced(model: torch.nn.Module, req: GenerateRequest, res: GenerateResult) -> torch.Tensor:
    """[N, V] log q of every sampled position from one full forward over prompt + sampled tokens, fp32."""
    ids = torch.tensor([req.prompt_ids + res.token_ids[:-1]])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    t = req.params.temperature or 1.0
    return torch.log_softmax(logits[len(req.prompt_ids) - 1 :] / t, dim=-1)


def assert_matches_teacher(
    model: torch.nn.Module, req: GenerateRequest, res: GenerateResult, atol: float = 1e-4
) -> None:
    """Sampled logprobs within ``atol`` of the teacher pass; top-k values match and ids match torch.topk
    except where two candidates are tied within ``atol`` (their order is then arbitrary)."""
    ref = teacher_forced(model, req, res)
    sampled = ref.gather(1, torch.tensor(res.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(res.logprobs), sampled, atol=atol, rtol=0)
    k = req.params.n_top_logprobs
    values, ids = torch.topk(ref, k, dim=-1)
    torch.testing.assert_close(torch.tensor(res.topk_logprobs), values, atol=atol, rtol=0)
    got = torch.tensor(res.topk_ids)
    for pos, col in (got != ids).nonzero().tolist():
        assert abs(float(ref[pos, got[pos, col]]) - float(values[pos, col])) < atol, (pos, col)


@pytest.fixture(name="assert_matches_teacher")
def _assert_matches_teacher_fixture():
    return assert_matches_teacher


@pytest.fixture(name="teacher_forced")
def _teacher_forced_fixture():
    return teacher_forced


# ───────────────────────── loopback HTTP servers speaking SGLang's and vLLM's documented shapes ─────────────────────────

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class FakeServer:
    """A loopback server; ``routes[(method, path)](body, query) -> (status, json)``. Records every call in
    ``calls`` as (path, query, body); ``fail_next[path]`` lists statuses to answer before the route runs;
    ``delay_sec`` delays every answer."""

    def __init__(self, routes):
        self.routes = routes
        self.calls: list[tuple[str, dict, dict | None]] = []
        self.fail_next: dict[str, list[int]] = {}
        self.delay_sec = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _handle(self, method):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                server.calls.append((url.path, query, body))
                time.sleep(server.delay_sec)
                failures = server.fail_next.get(url.path)
                if failures:
                    status, payload = failures.pop(0), {"error": "injected"}
                elif (method, url.path) in server.routes:
                    status, payload = server.routes[(method, url.path)](body, query)
                else:
                    status, payload = 404, {"detail": "Not Found"}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def paths(self) -> list[str]:
        return [c[0] for c in self.calls]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _continuation(prompt: list[int], n: int, stop: list[int]) -> tuple[list[int], str]:
    """A deterministic fake continuation; finishes at the first stop id."""
    out = []
    for i in range(n):
        t = (sum(prompt) + 7 * i) % 50
        out.append(t)
        if t in stop:
            return out, "stop"
    return out, "length"


def _lp(t: int, rank: int) -> float:
    return -0.1 * (rank + 1) - 0.01 * t


@pytest.fixture
def sglang_server():
    state = {"version": "0"}

    def generate(body, _query):
        sp = body.get("sampling_params", {})
        if not isinstance(sp.get("max_new_tokens"), int) or sp["max_new_tokens"] < 0:
            # http_server.validation_exception_handler: 400 with the ErrorResponse at the top level, param null, the
            # message str(exc) + str(exc.errors()) (contracts/sglang_0.5/error_bad_body.json)
            return 400, {"object": "error", "message": "[{'loc': ('body', 'sampling_params', 'max_new_tokens'), "
                         "'msg': 'must be >= 0'}]", "type": "Bad Request", "param": None, "code": 400}
        # SGLang's ignore_eos skips every token stop, stop_token_ids included (schedule_batch._check_token_based_finish)
        stops = [] if sp.get("ignore_eos") else sp.get("stop_token_ids") or []
        ids, reason = _continuation(body["input_ids"], sp["max_new_tokens"], stops)
        k = body.get("top_logprobs_num", 0)
        finish = (
            {"type": "stop", "matched": ids[-1]}
            if reason == "stop"
            else {"type": "length", "length": len(ids)}
        )
        return 200, {
            "text": "",
            "output_ids": ids,
            "meta_info": {
                "id": body.get("rid"),
                "finish_reason": finish,
                "prompt_tokens": len(body["input_ids"]),
                "completion_tokens": len(ids),
                "cached_tokens": 3,
                "weight_version": state["version"],
                "output_token_logprobs": [[_lp(t, 0), t, None] for t in ids],
                "output_top_logprobs": [[[_lp(t + j, j), t + j, None] for j in range(k)] for t in ids],
                "e2e_latency": 0.01,
            },
        }

    def disk(body, _query):
        if body["model_path"].startswith("/missing"):
            return 400, {
                "success": False,
                "message": f"Failed to get weights iterator: {body['model_path']} not found",
            }
        state["version"] = body["weight_version"]
        return 200, {
            "success": True,
            "message": "Succeeded to update model weights.",
            "num_paused_requests": 0,
        }

    def distributed(body, _query):
        state["version"] = body.get("weight_version") or state["version"]  # absent: a bucket before the last
        return 200, {"success": True, "message": "ok"}

    ok = lambda body, query: (200, {"success": True, "message": "ok"})
    server = FakeServer(
        {
            ("POST", "/generate"): generate,
            ("POST", "/update_weights_from_disk"): disk,
            ("POST", "/init_weights_update_group"): ok,
            ("POST", "/update_weights_from_distributed"): distributed,
            ("POST", "/pause_generation"): ok,
            ("POST", "/continue_generation"): ok,
            ("GET", "/health"): lambda b, q: (200, {}),
        }
    )
    yield server
    server.close()


@pytest.fixture
def vllm_server():
    def completions(body, _query):
        k = body.get("logprobs") or 0
        if k > 20:
            return 400, {
                "error": {
                    "message": f"Requested sample logprobs of {k}, which is greater than max allowed: 20",
                    "type": "BadRequestError",
                    "param": "logprobs",
                    "code": 400,
                }
            }
        ids, reason = _continuation(body["prompt"], body["max_tokens"], body.get("stop_token_ids") or [])
        top = []
        for t in ids:  # vLLM adds the sampled token to the K best: K+1 entries, unordered in JSON
            row = {f"token_id:{t + j}": _lp(t + j, j) for j in range(k)}
            row[f"token_id:{t}"] = _lp(t, 0)
            row["token_id:999"] = -50.0
            top.append(dict(reversed(list(row.items()))))
        return 200, {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "text": "",
                    "token_ids": ids,
                    "logprobs": {
                        "text_offset": list(range(len(ids))),
                        "tokens": [f"token_id:{t}" for t in ids],
                        "token_logprobs": [_lp(t, 0) for t in ids],
                        "top_logprobs": top,
                    },
                    "finish_reason": reason,
                    "stop_reason": ids[-1] if reason == "stop" else None,
                }
            ],
            "usage": {
                "prompt_tokens": len(body["prompt"]),
                "completion_tokens": len(ids),
                "prompt_tokens_details": {"cached_tokens": 2},
            },
        }

    msg = lambda text: lambda body, query: (200, {"message": text})
    server = FakeServer(
        {
            ("GET", "/v1/models"): lambda b, q: (
                200,
                {"object": "list", "data": [{"id": "tiny-model", "object": "model"}]},
            ),
            ("POST", "/v1/completions"): completions,
            ("POST", "/pause"): lambda b, q: (200, {"status": "paused"}),
            ("POST", "/resume"): lambda b, q: (200, {"status": "resumed"}),
            ("POST", "/init_weight_transfer_engine"): msg("Weight transfer initialized"),
            ("POST", "/start_weight_update"): msg("Weight update started"),
            ("POST", "/update_weights"): msg("Weights updated"),
            ("POST", "/finish_weight_update"): msg("Weight update finished"),
        }
    )
    yield server
    server.close()
