"""`fireflash agent run` / `replay`: a scripted attempt on a bundled task, graded, saved and replayed."""

import json
import os

import pytest
from typer.testing import CliRunner

from fireflash.cli.agent import app
from fireflash.protocols import Status, Trajectory
from fireflash.tasks.loader import DATA_DIR

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]

SOLVE = [
    '<tool_call>\n{"name": "Read", "arguments": {"file_path": "/app/customers.csv", "limit": 3}}\n</tool_call>',
    '<tool_call>\n{"name": "Bash", "arguments": {"command": "awk -F, \'NR == 1 || $3 == \\"FR\\"\' customers.csv > fr.csv && wc -l fr.csv"}}\n</tool_call>',
    "Wrote /app/fr.csv with the header and the FR rows.",
]


def test_agent_run_scripted_on_bundled_task_is_graded_and_replays(tmp_path):
    script = tmp_path / "turns.json"
    script.write_text(json.dumps(SOLVE))
    out = tmp_path / "out"
    runner = CliRunner()
    task_dir = DATA_DIR / "train" / "csv-filter-rows"
    result = runner.invoke(app, ["run", str(task_dir), "--engine", "scripted", "--script", str(script), "--out", str(out),
                                 f"sandbox.backend={json.dumps(os.environ.get('FIREFLASH_TEST_SANDBOX', 'bwrap'))}"])
    assert result.exit_code == 0, result.output
    assert "completed (stop) in 3 turns · reward 1.00 (solved)" in result.output
    [traj_path] = out.glob("*-attempt-0.json")
    traj = Trajectory.load(traj_path)
    assert traj.status == Status.COMPLETED and traj.n_turns == 3
    assert json.loads((out / f"{traj.task_id}-attempt-0.score.json").read_text())["solved"] is True
    replay = runner.invoke(app, ["replay", str(out / f"{traj.task_id}-attempt-0.json")])
    assert replay.exit_code == 0 and "── assistant · turn 2" in replay.output and "→ Bash" in replay.output
    assert replay.output == (out / f"{traj.task_id}-attempt-0.txt").read_text()


def test_agent_run_reports_bad_inputs_without_traceback(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["run", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "TaskLoadError" in missing.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    replay = runner.invoke(app, ["replay", str(bad)])
    assert replay.exit_code == 2 and "not a readable trajectory JSON" in replay.output
