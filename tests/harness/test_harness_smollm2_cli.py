"""Issue 5's Done-when: the embedded SmolLM2-135M runs `fireflash agent run` on a bundled task end to end.

The local engine samples real turns (two, 48 tokens each, so it stays well under a minute on two busy
cores) with the few-shot exchanges and the tool-call prefix of configs/local.toml; the attempt is saved,
transcribed and graded. Whether the model solves the task is not the point: the record is.
"""

import json
import math
import os

import pytest
from typer.testing import CliRunner

from fireflash.cli.agent import app
from fireflash.protocols import Status, Trajectory
from fireflash.tasks.loader import DATA_DIR

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

ASSISTANT_PREFIX = '<tool_call>\n{"name": "'  # configs/local.toml


def test_smollm2_agent_run_on_bundled_task_saves_and_grades(tmp_path):
    out = tmp_path / "out"
    overrides = {
        "model.name_or_path": "smollm2-135m",
        "sandbox.backend": os.environ.get("FIREFLASH_TEST_SANDBOX", "bwrap"),
        "harness.max_turns": 2,
        "harness.sampling.max_new_tokens_per_turn": 48,
        "harness.few_shot": True,
        "harness.assistant_prefix": ASSISTANT_PREFIX,
        "harness.bash_timeout_sec": 10.0,
    }
    args = [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    result = CliRunner().invoke(app, ["run", str(DATA_DIR / "heldout" / "text-tail-lines"), "--engine", "local",
                                      "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    stem = out / "text-tail-lines-attempt-0"
    traj = Trajectory.load(stem.with_suffix(".json"))
    assert stem.with_suffix(".txt").read_text().strip()
    assert traj.status != Status.FAILED and traj.error is None, traj.error
    assert traj.n_turns >= 1 and traj.metadata["assistant_prefix"] == ASSISTANT_PREFIX
    sampled = [seg.rollout_logprobs[i] for seg in traj.segments for i, m in enumerate(seg.loss_mask) if m == 1]
    assert sampled, "no sampled token carries loss mask 1"
    assert all(math.isfinite(lp) for lp in sampled)
    score = json.loads(stem.with_suffix(".score.json").read_text())
    assert 0.0 <= score["reward"] <= 1.0
