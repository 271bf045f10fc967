"""`fireflash agent run` refuses bad inputs in one line before any sandbox starts, and keeps every attempt's files."""

import json
import os

import pytest
from typer.testing import CliRunner

from fireflash.cli.agent import app, output_paths
from fireflash.protocols import Trajectory
from fireflash.tasks.loader import DATA_DIR

TASK = DATA_DIR / "train" / "csv-filter-rows"
SANDBOX = f"sandbox.backend={json.dumps(os.environ.get('FIREFLASH_TEST_SANDBOX', 'bwrap'))}"
ANSWER = ['Nothing to do.']


def _refused(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # typer.Exit: no traceback
    message = result.output.strip()
    assert len(message.splitlines()) == 1, message
    for word in words:
        assert word in message, message


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "turns.json"
    path.write_text(json.dumps(ANSWER))
    return path


def test_output_paths_append_suffixes_to_the_whole_name(tmp_path):
    one, two = output_paths(tmp_path, "task", "run.1"), output_paths(tmp_path, "task", "run.2")
    assert [p.name for p in one.values()] == ["task-run.1.json", "task-run.1.txt", "task-run.1.score.json"]
    assert not set(one.values()) & set(two.values())


@pytest.mark.parametrize("attempt_id", ["../../escape", "a/b", "..", ".hidden", "-rf", "a b", "x\ny", ""])
def test_unsafe_attempt_id_is_refused_before_anything_runs(tmp_path, script, attempt_id):
    root = tmp_path / "sandboxes"
    result = CliRunner().invoke(app, ["run", str(TASK), "--engine", "scripted", "--script", str(script), "--out",
                                      str(tmp_path / "out" / "deep"), "--attempt-id", attempt_id,
                                      f"sandbox.root_dir={json.dumps(str(root))}"])
    _refused(result, "--attempt-id")
    assert not root.exists() and not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["turns.json"]


def test_unwritable_out_is_refused_before_the_attempt_runs(tmp_path, script):
    root = tmp_path / "sandboxes"
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for out in ("/proc/fireflash-nope", str(a_file / "sub")):
        result = CliRunner().invoke(app, ["run", str(TASK), "--engine", "scripted", "--script", str(script),
                                          "--out", out, f"sandbox.root_dir={json.dumps(str(root))}"])
        _refused(result, f"--out {out}", "writable")
        assert not root.exists()  # no sandbox backend was made


def test_scripted_engine_without_a_script_is_refused(tmp_path):
    root = tmp_path / "sandboxes"
    result = CliRunner().invoke(app, ["run", str(TASK), "--engine", "scripted", "--out", str(tmp_path / "out"),
                                      f"sandbox.root_dir={json.dumps(str(root))}"])
    _refused(result, "--script")
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    result = CliRunner().invoke(app, ["run", str(TASK), "--engine", "scripted", "--script", str(empty), "--out",
                                      str(tmp_path / "out"), f"sandbox.root_dir={json.dumps(str(root))}"])
    _refused(result, "non-empty")
    assert not root.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_server_engine_without_url_is_one_line(tmp_path, kind):
    result = CliRunner().invoke(app, ["run", str(TASK), "--engine", kind, "--out", str(tmp_path / "out")])
    _refused(result, "engine.url=")


@pytest.mark.sandbox
@pytest.mark.integration
def test_attempt_ids_with_dots_keep_separate_files(tmp_path, script):
    out = tmp_path / "out"
    runner = CliRunner()
    for attempt_id in ("run.1", "run.2"):
        result = runner.invoke(app, ["run", str(TASK), "--engine", "scripted", "--script", str(script), "--out",
                                     str(out), "--attempt-id", attempt_id, SANDBOX])
        assert result.exit_code == 0, result.output
        assert f"trajectory: {out / f'csv-filter-rows-{attempt_id}.json'}" in result.output
        assert f"transcript: {out / f'csv-filter-rows-{attempt_id}.txt'}" in result.output
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"csv-filter-rows-run.{i}.{ext}" for i in (1, 2) for ext in ("json", "score.json", "txt")]
    assert [Trajectory.load(out / f"csv-filter-rows-run.{i}.json").attempt_id for i in (1, 2)] == ["run.1", "run.2"]
