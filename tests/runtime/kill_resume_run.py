"""A training run for test_resume_kill.py to SIGKILL and resume: run as a script, in its own process.

    python tests/runtime/kill_resume_run.py RUN_DIR --steps 4 --checkpoint-every 2 --hang-at-step 4
    python tests/runtime/kill_resume_run.py RUN_DIR --steps 4 --checkpoint-every 2 --resume

It builds the run as the end-to-end tests do (conftest.py: the bundled text-count-lines task in bwrap
sandboxes, the tiny random model, a scripted engine) and resumes as ``fireflash train --resume`` does
(cli/train.py: load the latest checkpoint's weights into trainer and engine, restore the optimizer,
RNG, step, version and data cursor). The engine replays a right or wrong command on turn 0 (attempt 0
of each group solves, so every group has signal) and samples later turns from its own copy of the
model, which follows the trainer's weight updates.

Each finished optimizer step appends ``{"run", "step", "groups", "sampled_versions"}`` to
``RUN_DIR/steps.jsonl`` (which groups it trained, which weight versions sampled their turns).
``--hang-at-step N`` makes step N accumulate its gradients, write ``RUN_DIR/hanging``, and then block
before the optimizer update, so a kill lands in the middle of that step. On a normal end it prints one
JSON line ``{"step", "weight_version"}``.

The test starts it through ``run`` in a multiprocessing forkserver that has imported ``PRELOAD`` once:
a separate process like the script, without paying torch's and transformers' imports (seconds each on
a loaded machine) once per process.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path

from fireflash.engines.scripted import ScriptedEngine
from fireflash.grading import make_grader
from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.models import build_tiny_model, build_tiny_tokenizer, load_policy
from fireflash.protocols import GenerateRequest, Group
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.local import LocalRuntime
from fireflash.tracking import MetricsWriter
from fireflash.sandbox import make_backend
from fireflash.sandbox.config import SandboxConfig
from fireflash.tasks import bundled_tasks
from fireflash.training.checkpoint import latest_checkpoint
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer

GROUP_SIZE = 2
PRELOAD = ["kill_resume_run", "transformers.models.llama.modeling_llama", "transformers.tokenization_utils_fast"]
"""Modules a forkserver imports before forking runs (the heavy imports of ``main``)."""

# the end-to-end tests' commands, from their conftest.py by path: as a plain module name, "conftest"
# could resolve to another test folder's
_spec = importlib.util.spec_from_file_location("runtime_e2e_conftest", Path(__file__).with_name("conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
RIGHT, WRONG = _conftest.RIGHT, _conftest.WRONG


def script(request: GenerateRequest) -> str | None:
    """Turn 0: attempt 0 of every group solves, the others do not; later turns: sample the model."""
    m = re.search(r"/g(\d+)/a(\d+)#\d+-turn(\d+)", request.request_id)
    attempt, turn = int(m[2]), int(m[3])
    if turn >= 1:
        return None
    return RIGHT if attempt == 0 else WRONG


class LoggedTrainer(Trainer):
    """``Trainer`` that logs each step's groups to ``steps.jsonl`` and can block in the middle of a step."""

    def __init__(self, *args, run_dir: Path, label: str, hang_at_step: int | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.run_dir, self.label, self.hang_at_step = run_dir, label, hang_at_step

    def train_step(self, groups: list[Group]) -> dict[str, float]:
        if self.step + 1 == self.hang_at_step:
            self.accumulate_gradients(groups)  # real work in flight when the kill lands
            (self.run_dir / "hanging").write_text(str(self.step + 1))
            time.sleep(3600)
        metrics = super().train_step(groups)
        versions = {v for g in groups for t in g.trajectories for s in t.segments for v in s.weight_version if v >= 0}
        row = {
            "run": self.label,
            "step": self.step,
            "groups": [int(re.search(r"/g(\d+)/", g.trajectories[0].attempt_id)[1]) for g in groups],
            "sampled_versions": sorted(versions),
        }
        with (self.run_dir / "steps.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        return metrics


async def main(args: argparse.Namespace) -> dict[str, int]:
    import torch
    from transformers.utils import logging as hf_logging

    # no tqdm bars: their multiprocessing lock would outlive a SIGKILLed run as a leaked-semaphore warning
    hf_logging.disable_progress_bar()
    # the trainer thread and the engine's sampling threads each get one core's worth (cli/train.py's
    # threads_per_role): on a shared machine, spinning OpenMP pools in every thread slow each other ~10x
    torch.set_num_threads(1)
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    task = next(t for t in bundled_tasks("train") if t.id == "text-count-lines")
    tok = build_tiny_tokenizer()
    if args.resume:  # as cli/train.py: weights from the latest checkpoint, then the trainer state
        ckpt = latest_checkpoint(run_dir / "checkpoints")
        policy, engine_model = load_policy(str(ckpt)), load_policy(str(ckpt))
    else:
        policy, engine_model = build_tiny_model(len(tok), seed=0), build_tiny_model(len(tok), seed=0)
    objective = ObjectiveConfig(loss_floor_tokens=64)
    trainer = LoggedTrainer(
        policy, tok, TrainerConfig(lr=1e-3, micro_batch_tokens=4096), objective, temperature=1.0,
        run_dir=run_dir, label="resumed" if args.resume else "first", hang_at_step=args.hang_at_step,
    )
    cursor = trainer.restore(run_dir / "checkpoints") if args.resume else None
    engine = ScriptedEngine(tok, script, model=engine_model, seed=0)
    if trainer.weight_version:
        await engine.update_weights(trainer.state_dict(), trainer.weight_version)
    backend = make_backend(SandboxConfig())
    grader = make_grader(task.grader)
    harness = HarnessConfig(max_turns=2, context_window_tokens=4096, max_total_tokens=8192,
                            sampling=SamplingConfig(max_new_tokens_per_turn=64, n_top_logprobs=32))
    writer = MetricsWriter(run_dir, tensorboard=False)
    runtime = LocalRuntime(
        tasks=[task], backend=backend, engine=engine, tokenizer=tok, trainer=trainer, grader_for=lambda t: grader,
        harness=harness, objective=objective, run_dir=run_dir, steps=args.steps, group_size=GROUP_SIZE,
        groups_per_step=1, max_inflight_attempts=4, max_attempt_retries=2, discard_zero_signal_groups=True, seed=0,
        checkpoint_every_steps=args.checkpoint_every, cursor=cursor, writer=writer,
    )
    try:
        await runtime.run()
    finally:
        writer.close()
        await backend.close()
    return {"step": trainer.step, "weight_version": trainer.weight_version}


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=1)
    parser.add_argument("--hang-at-step", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    return parser.parse_args(argv)


def run(argv: list[str], log_path: str) -> None:
    """The script's work in a child process: ``argv`` as on the command line, stdout and stderr to ``log_path``."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    print(json.dumps(asyncio.run(main(_parse(argv)))), flush=True)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(_parse(sys.argv[1:])))), flush=True)
