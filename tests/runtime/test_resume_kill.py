"""kill -9 in the middle of a step, then resume: versions, metrics and the data cursor continue exactly.

A training run in a process of its own (kill_resume_run.py: bwrap sandboxes, the tiny model, a scripted
engine that samples from the model after its first turn) checkpoints every 2 steps. It finishes steps
1-3 (step 3 is logged but not checkpointed) and is SIGKILLed while step 4 has its gradients accumulated
but no update yet, with attempts in flight. A second process resumes from the step-2 checkpoint and
runs to step 4. Afterwards metrics.jsonl holds steps 1-4 exactly once each with versions 1-4, every
issued group was trained once or is carried in the final cursor, the resumed engine samples at the
restored version, and no group was lost.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import kill_resume_run
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]

STEPS, CHECKPOINT_EVERY, KILL_IN_STEP = 4, 2, 4


def _start(run_dir: Path, log: Path, *extra: str) -> multiprocessing.Process:
    """kill_resume_run.py in its own process, forked from a server that imported torch once (its docstring)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(kill_resume_run.PRELOAD)
    argv = [str(run_dir), "--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY), *extra]
    process = ctx.Process(target=kill_resume_run.run, args=(argv, str(log)))
    process.start()
    return process


def _wait(process: multiprocessing.Process, timeout_sec: float) -> int | None:
    process.join(timeout_sec)
    return process.exitcode


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _checkpoint_meta(run_dir: Path) -> dict:
    root = run_dir / "checkpoints"
    return json.loads((root / (root / "latest").read_text().strip() / "fireflash.json").read_text())


def test_kill_9_mid_step_then_resume_continues_exactly(tmp_path):
    run_dir = tmp_path / "run"
    first = _start(run_dir, tmp_path / "first.log", "--hang-at-step", str(KILL_IN_STEP))
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "hanging").is_file():
            assert first.is_alive(), f"the first run ended early:\n{(tmp_path / 'first.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the first run never reached the step to kill"
            time.sleep(0.1)
        os.kill(first.pid, signal.SIGKILL)
        assert _wait(first, 30) == -signal.SIGKILL
    finally:
        if first.is_alive():
            first.kill()
            first.join()

    saved = _checkpoint_meta(run_dir)
    # the killed run logged step 3 past its last checkpoint: the resumed run redoes step 3
    assert (saved["step"], saved["weight_version"]) == (2, 2)
    assert [r["step"] for r in _rows(run_dir / "metrics.jsonl")] == [1, 2, 3]
    cursor = saved["cursor"]

    second = _start(run_dir, tmp_path / "second.log", "--resume")
    try:
        assert _wait(second, 240) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        if second.is_alive():
            second.kill()
            second.join()
    summary = json.loads((tmp_path / "second.log").read_text().strip().splitlines()[-1])
    assert summary == {"step": STEPS, "weight_version": STEPS}

    # weight versions continue from the checkpoint: each step once, no repeat of the killed run's step 3
    metrics = _rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2, 3, 4]
    assert [r["weight_version"] for r in metrics] == [1.0, 2.0, 3.0, 4.0]
    assert all(r["groups/lost_to_infrastructure"] == 0 for r in metrics)
    assert all(r["rollout/lost_attempts"] == 0 for r in metrics)
    final = _checkpoint_meta(run_dir)
    assert (final["step"], final["weight_version"]) == (STEPS, STEPS)

    steps = _rows(run_dir / "steps.jsonl")
    before = [g for r in steps if r["run"] == "first" and r["step"] <= saved["step"] for g in r["groups"]]
    resumed = [r for r in steps if r["run"] == "resumed"]
    after = [g for r in resumed for g in r["groups"]]
    assert [r["step"] for r in resumed] == [3, 4]
    # the resumed engine samples with the restored weights' version, never the base model's 0
    assert all(min(r["sampled_versions"]) >= saved["weight_version"] for r in resumed)
    assert all(max(r["sampled_versions"]) < r["step"] for r in resumed)

    # the data cursor: groups issued before the checkpoint were trained or are carried to the resume
    unfinished = {int(g) for g in cursor["unfinished"]}
    assert unfinished and not unfinished & set(before)
    assert set(before) | unfinished == set(range(cursor["next_group"]))
    # ...and continue: no group trained twice, none skipped (trained or carried in the final cursor)
    trained = before + after
    assert len(trained) == len(set(trained))
    assert set(after) <= unfinished | set(range(cursor["next_group"], final["cursor"]["next_group"]))
    carried = {int(g) for g in final["cursor"]["unfinished"]}
    assert set(trained) | carried == set(range(final["cursor"]["next_group"]))
