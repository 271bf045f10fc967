"""`fireflash agent run` writes the trajectory and transcript before grading, so a failing grader keeps them."""

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from fireflash.cli.agent import app
from fireflash.protocols import Sandbox, Score, Status, Task, Trajectory
from fireflash.tasks.loader import DATA_DIR

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]

SANDBOX = f"sandbox.backend={json.dumps(os.environ.get('FIREFLASH_TEST_SANDBOX', 'bwrap'))}"


class GraderBroke(RuntimeError):
    """Raised by ``crashing_grade``."""


async def crashing_grade(task: Task, sandbox: Sandbox) -> Score:
    """A grader plug-in that always fails (named by dotted path in the copied task's task.toml)."""
    raise GraderBroke("the grader fell over")


def test_trajectory_and_transcript_survive_a_harness_failure_and_a_grader_error(tmp_path):
    task_dir = tmp_path / "text-tail-lines"
    shutil.copytree(DATA_DIR / "heldout" / "text-tail-lines", task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("[metadata]\n", f'[metadata]\ngrader = "{__name__}.crashing_grade"\n'))
    script = tmp_path / "turns.json"  # one turn, then the script runs out: the harness reports FAILED
    script.write_text(json.dumps(['<tool_call>\n{"name": "Bash", "arguments": {"command": "tail -n 3 notes.txt"}}\n</tool_call>']))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(task_dir), "--engine", "scripted", "--script", str(script),
                                      "--out", str(out), SANDBOX])
    assert isinstance(result.exception, GraderBroke), result.output
    traj = Trajectory.load(out / "text-tail-lines-attempt-0.json")
    assert traj.status == Status.FAILED and traj.error.type == "ScriptExhausted" and traj.n_turns == 1
    transcript = (out / "text-tail-lines-attempt-0.txt").read_text()
    assert "tail -n 3 notes.txt" in transcript
    assert not (out / "text-tail-lines-attempt-0.score.json").exists()
    assert f"trajectory: {out / 'text-tail-lines-attempt-0.json'}" in result.output
