"""A tiny but real training setup: a bundled task in real sandboxes, a scripted engine, the tiny model.

The scripted engine answers by attempt: attempts whose index is in ``solvers`` write the right answer,
the others a wrong one, so groups have reward variance (or none, when every attempt solves).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.protocols import GenerateRequest
from fireflash.rl.config import ObjectiveConfig
from fireflash.tasks import bundled_tasks
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer

RIGHT = '<tool_call>\n{"name": "Bash", "arguments": {"command": "wc -l < /app/notes.txt > /app/count.txt"}}\n</tool_call>'
WRONG = '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo 0 > /app/count.txt"}}\n</tool_call>'
DONE = "Done."


def attempt_script(solves: Callable[[int, int], bool]) -> Callable[[GenerateRequest], str]:
    """turn 0: the right or wrong command (by ``solves(group, attempt)``); turn 1: stop."""

    def script(request: GenerateRequest) -> str:
        m = re.search(r"/g(\d+)/a(\d+)#\d+-turn(\d+)", request.request_id)
        group, attempt, turn = int(m[1]), int(m[2]), int(m[3])
        if turn >= 1:
            return DONE
        return RIGHT if solves(group, attempt) else WRONG

    return script


@pytest.fixture(scope="session")
def task():
    return next(t for t in bundled_tasks("train") if t.id == "text-count-lines")


@pytest.fixture
def setup():
    """(tokenizer, trainer factory, engine factory, harness config) on the tiny model."""
    tok = build_tiny_tokenizer()

    def trainer(model=None, **objective):
        model = model if model is not None else build_tiny_model(len(tok), seed=0)
        cfg = TrainerConfig(lr=1e-3, micro_batch_tokens=4096)
        return Trainer(model, tok, cfg, ObjectiveConfig(loss_floor_tokens=64, **objective), temperature=1.0)

    def engine(solves):
        return ScriptedEngine(tok, attempt_script(solves), seed=0)

    harness = HarnessConfig(max_turns=3, context_window_tokens=4096, max_total_tokens=8192,
                            sampling=SamplingConfig(max_new_tokens_per_turn=64, n_top_logprobs=32))
    return tok, trainer, engine, harness


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance for one test module; its actors import this folder's modules (the builders)."""
    ray = pytest.importorskip("ray", reason="the Ray backend needs ray (pip install -e '.[dev]' installs it)")
    before = os.environ.get("PYTHONPATH")
    # Ray's workers inherit this environment: they import the test modules' builders by module name
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), before]))
    start = time.perf_counter()
    for tries_left in (1, 0):
        try:
            ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)  # logical CPUs for the actors
            break
        except Exception:  # noqa: BLE001 - Ray raises a bare Exception when its agents start too slowly
            ray.shutdown()  # on a loaded 2-core machine that happens now and then: try once more
            if not tries_left:
                raise
    print(f"ray.init: {time.perf_counter() - start:.1f} s")
    try:
        yield
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
