"""`fireflash train --resume` starts from the checkpoint alone: weights and tokenizer both come from it.

The base model directory may have changed since the checkpoint was written (the local recipe trains from
runs/sft/model, which the next warm-up rewrites); a checkpoint is a complete HF model directory, so
resuming reads nothing from the base but its name.
"""

from pathlib import Path

import pytest

from fireflash.config import FireFlashConfig
from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.job import run_training
from fireflash.training.trainer import Trainer

TASK = Path(__file__).resolve().parents[2] / "src" / "fireflash" / "tasks" / "data" / "train" / "text-count-lines"


@pytest.mark.sandbox
@pytest.mark.integration
def test_resume_loads_the_tokenizer_from_the_checkpoint(tmp_path, capsys):
    base, run_dir = tmp_path / "base", tmp_path / "run"
    tok = build_tiny_tokenizer()
    build_tiny_model(len(tok)).save_pretrained(base)
    tok.save_pretrained(base)
    cfg = FireFlashConfig.model_validate({
        "model": {"name_or_path": str(base)},
        "tasks": {"paths": [str(TASK)]},
        "engine": {"num_threads": 1, "max_batch_size": 2},
        "harness": {"max_turns": 1, "context_window_tokens": 1024, "max_total_tokens": 2048,
                    "sampling": {"max_new_tokens_per_turn": 8, "n_top_logprobs": 4}},
        "rl": {"score_centering": False},
        "training": {"micro_batch_tokens": 1024},
        # a run that stops (at its wall limit) right after everything is built, before any step
        "runtime": {"steps": 1, "group_size": 2, "max_inflight_attempts": 1, "max_wall_sec": 1.0, "threads_per_role": 1},
        "tracking": {"run_dir": str(run_dir), "tensorboard": False, "save_trajectories": False},
    })
    trainer = Trainer(build_tiny_model(len(tok)), tok, cfg.training, ObjectiveConfig(), temperature=1.0)
    trainer.save_checkpoint(run_dir / "checkpoints", cursor={"next_group": 0, "unfinished": {}})
    # the base directory changed since: its tokenizer is gone
    removed = [p for p in base.iterdir() if p.name.startswith(("tokenizer", "special_tokens", "chat_template"))]
    assert removed
    for p in removed:
        p.unlink()

    assert run_training(cfg, resume=True) == run_dir
    # output to a pipe (make train > log) gets plain progress lines, not a live table's last frame (issue #28)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("train: 0/1, ")]
    assert lines[0] == "train: 0/1, 0 s  attempts 0 (0 solved, 0 lost), 0 running, 0 groups queued" and len(lines) >= 2, out
