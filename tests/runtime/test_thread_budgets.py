"""Each role's torch thread budget holds inside its own thread (issue 8: rollout and training share the cores).

torch keeps one intra-op budget per thread, and a new thread starts with the last value set in any thread;
so each role sets its count inside the thread its work runs on, and no role's setting overrides another's.
"""

import asyncio

import pytest
import torch

from fireflash.config import FireFlashConfig
from fireflash.engines.local import LocalEngine
from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.protocols import GenerateRequest, Group, SamplingParams, Score, Segment, Trajectory
from fireflash.rl.config import ObjectiveConfig
from fireflash.cli.train import describe_plan, role_threads, threads_per_role
from fireflash.runtime.memory import TrainerThread
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer

pytestmark = pytest.mark.unit


@pytest.fixture
def caller_threads():
    """The test thread's own budget, set to 3 and restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield 3
    torch.set_num_threads(before)


def _group(n_vocab: int) -> Group:
    """One group of two short attempts with sampled tokens (rollout numbers need not match the model)."""
    trajectories = []
    for i in range(2):
        ids = [5 + i, 9, 12, 30 + i, 41, 7]
        mask = [0, 0, 0, 1, 1, 1]
        trajectories.append(Trajectory(task_id="t", attempt_id=f"t/{i}", segments=[Segment(
            token_ids=ids, loss_mask=mask, rollout_logprobs=[-1.0 * m for m in mask],
            topk_ids=[[t % n_vocab, 3] if m else [] for t, m in zip(ids, mask)],
            topk_logprobs=[[-1.0, -2.0] if m else [] for m in mask], weight_version=[0 if m else -1 for m in mask],
        )]))
    return Group(task_id="t", trajectories=trajectories, scores=[Score(reward=1.0, solved=True), Score(reward=0.0, solved=False)],
                 advantages=[1.0, -1.0])


def test_engine_and_trainer_each_work_on_their_own_thread_budget(caller_threads):
    """Built in `fireflash train`'s order — the trainer thread's object, then the engine (its worker thread
    sets 1), then the trainer's first call starts its thread (which sets 2) — the engine's forward passes run
    with 1 thread, the trainer's step with 2, and building the engine leaves the caller's own budget alone.

    The trainer's set comes after the engine's and before the engine's first forward pass: torch gives a thread
    its budget lazily, at first use, from the last value set anywhere, so a set that does not force that
    initialisation first is lost here."""
    tok = build_tiny_tokenizer()
    engine_model, trainer_model = build_tiny_model(len(tok)), build_tiny_model(len(tok))
    seen: dict[str, list[int]] = {"engine": [], "trainer": []}
    engine_model.model.layers[0].register_forward_hook(lambda *_: seen["engine"].append(torch.get_num_threads()))
    trainer_model.model.layers[0].register_forward_hook(lambda *_: seen["trainer"].append(torch.get_num_threads()))
    trainer = Trainer(trainer_model, tok, TrainerConfig(lr=1e-3, micro_batch_tokens=64), ObjectiveConfig(loss_floor_tokens=8),
                      temperature=1.0)

    async def main():
        trainer_thread = TrainerThread(num_threads=2)
        engine = LocalEngine(engine_model, num_threads=1)
        caller_after_engine = torch.get_num_threads()
        try:
            await engine.pause()  # a round trip through the engine's worker: its thread has set its budget
            await engine.resume()
            assert await trainer_thread.run(torch.get_num_threads) == 2
            request = GenerateRequest(request_id="r", prompt_ids=tok.encode("echo hello"),
                                      params=SamplingParams(max_new_tokens=4, n_top_logprobs=2))
            # at once, as in a run: the engine samples while the trainer steps
            await asyncio.gather(engine.generate([request]), trainer_thread.run(trainer.train_step, [_group(len(tok))]))
            after = await asyncio.gather(engine.generate([request]), trainer_thread.run(torch.get_num_threads))
        finally:
            await engine.close()
            trainer_thread.close()
        return caller_after_engine, after[1]

    caller_after_engine, trainer_budget = asyncio.run(main())
    assert caller_after_engine == caller_threads
    assert seen["engine"] and set(seen["engine"]) == {1}
    assert seen["trainer"] and set(seen["trainer"]) == {2} and trainer_budget == 2
    assert torch.get_num_threads() == caller_threads


def test_an_explicit_engine_setting_wins_for_the_engine_only():
    assert role_threads(2, 1) == (1, 2)
    assert role_threads(2, None) == (2, 2)
    assert role_threads(None, None) == (threads_per_role(None),) * 2
    cfg = FireFlashConfig.model_validate({"runtime": {"threads_per_role": 2}, "engine": {"num_threads": 1}})
    assert "torch threads: 1 for the engine thread, 2 for the trainer thread" in describe_plan(cfg)
