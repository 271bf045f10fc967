"""The local backend with an SGLang-API server: the in-process trainer's weights reach it after a step.

The server is FireFlash's own (``launch_fireflash_server``, a child process, so it and the trainer are two
members of a real gloo weight-update group). After ``update_weights(trainer.state_dict(), v)`` the server
samples exactly what a fresh copy of the trainer's weights computes, by collective and by disk.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from fireflash.engines.serve_process import launch_fireflash_server
from fireflash.engines.sglang import SGLangEngine
from fireflash.models import build_tiny_model
from fireflash.protocols import GenerateRequest, SamplingParams
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.local_server import DiskSyncedEngine, connect_local_trainer
from fireflash.training.config import TrainerConfig
from fireflash.training.fsdp import free_port
from fireflash.training.trainer import Trainer

pytestmark = pytest.mark.integration
VOCAB = 97
PROMPT = [5, 9, 13, 2, 7, 11]
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6, n_top_logprobs=4, seed=3)


def _teacher_logprobs(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + tokens[:-1]])
    with torch.no_grad():
        logq = torch.log_softmax(model(ids).logits[0, len(prompt) - 1 :].float(), -1)
    return logq.gather(1, torch.tensor(tokens)[:, None])[:, 0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for both modes (a launch costs ~20 s): the disk test then starts from the weights the
    collective test left, which its first check must see replaced by the new trainer's."""
    root = tmp_path_factory.mktemp("server")
    build_tiny_model(VOCAB, seed=0).save_pretrained(root / "model")
    port = free_port()
    process = launch_fireflash_server(str(root / "model"), port, {"num_threads": 1}, timeout_sec=120,
                                      log_path=root / "server.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


@pytest.mark.parametrize("mode", ["collective", "disk"])
def test_trainer_weights_reach_the_server_after_each_update(server, tmp_path, mode):
    trainer_model = build_tiny_model(VOCAB, seed=7)  # not the server's weights: an update must change its outputs
    trainer = Trainer(trainer_model, None, TrainerConfig(), ObjectiveConfig(), temperature=1.0)

    async def run():
        engine = await connect_local_trainer(SGLangEngine(server), trainer, mode, tmp_path / "weights", 60)
        assert isinstance(engine, DiskSyncedEngine) == (mode == "disk")
        # the run's weight_sync_timeout_sec: the update's call waits for the server longer than the group does
        assert engine.weight_sync_timeout_sec == 60 and engine.update_timeout_sec == 600
        request = GenerateRequest(request_id="r", prompt_ids=PROMPT, params=PARAMS)
        (before,) = await engine.generate([request])  # the trainer's weights already, not the server's own
        before_teacher = _teacher_logprobs(trainer_model, PROMPT, before.token_ids)
        results = []
        for version in (1, 2):
            with torch.no_grad():  # a different model each time, as after an optimizer step
                for p in trainer_model.parameters():
                    p.mul_(0.9)
            await engine.update_weights(trainer.state_dict(), version)
            (res,) = await engine.generate([request])
            results.append((version, res, _teacher_logprobs(trainer_model, PROMPT, res.token_ids)))
        await engine.close()
        from torch.distributed.distributed_c10d import _world

        # the trainer's end is left on close: a group left behind kept its name taken for the next join in-process
        assert engine.group_name not in _world.pg_names.values()
        return before, before_teacher, results

    before, before_teacher, results = asyncio.run(run())
    assert before.weight_version == 0
    torch.testing.assert_close(torch.tensor(before.logprobs), before_teacher, atol=1e-5, rtol=0)
    for version, res, teacher in results:
        assert res.weight_version == version
        torch.testing.assert_close(torch.tensor(res.logprobs), teacher, atol=1e-5, rtol=0)
    assert results[0][1].logprobs != results[1][1].logprobs
    if mode == "disk":
        assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["weights-v000001", "weights-v000002"]  # the newest two
