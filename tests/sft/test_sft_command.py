"""`fireflash sft` end to end on a tiny random model: oracle replay in real sandboxes → steps → checkpoint."""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from fireflash.cli import app
from fireflash.models import build_tiny_model, build_tiny_tokenizer, load_policy

BACKEND = os.environ.get("FIREFLASH_TEST_SANDBOX", "bwrap")


def _config(tmp_path, tasks: list[str]) -> str:
    tok = build_tiny_tokenizer()
    model_dir = tmp_path / "tiny"
    build_tiny_model(len(tok), seed=0).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    path = tmp_path / "sft.toml"
    path.write_text(f"""
[sandbox]
backend = "{BACKEND}"
[harness]
assistant_prefix = "<tool_call>\\n{{\\"name\\": \\""
max_turns = 4
context_window_tokens = 4096
[harness.sampling]
max_new_tokens_per_turn = 512
n_top_logprobs = 2
[rl]
score_centering_topk = 2
[tracking]
tensorboard = false
[sft]
init_from = "{model_dir}"
tasks = {json.dumps(tasks)}
variants = ["direct", "script"]
epochs = 1.0
batch_size = 3
lr = 1e-3
run_dir = "{tmp_path / 'run'}"
""")
    return str(path)


def _task_dir(split: str, task_id: str) -> str:
    from fireflash.tasks.loader import bundled_tasks

    return str(next(t for t in bundled_tasks(split) if t.id == task_id).path)


def test_sft_trains_checkpoints_resumes_and_a_second_pass_trains_from_the_first(tmp_path):
    """One run, then what can follow it: --resume (nothing repeated), a plain rerun (refused), and `sft.passes`
    added with --resume (a run killed between passes continues); one oracle set and first pass serve all three."""
    config = _config(tmp_path, [_task_dir("train", "text-uppercase"), _task_dir("train", "text-head-lines")])
    result = CliRunner().invoke(app, ["sft", "-c", config])
    assert result.exit_code == 0, result.output
    # without a terminal (make train > log) each long phase says at once how much it has to do (issue #28)
    assert "oracle replays: 0/" in result.output and "sft steps: 0/" in result.output
    run = tmp_path / "run"
    n_kept = len(list((run / "oracle").glob("*.*.*.json")))
    assert n_kept >= 4 and json.loads((run / "oracle" / "dropped.json").read_text()) == []
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, -(-n_kept // 3) + 1))
    assert all(r["tokens/loss"] > 0 for r in rows)
    model_dir = (run / "model").resolve()
    assert (model_dir / "model.safetensors").exists() and (model_dir / "fireflash.json").exists()
    before = build_tiny_model(len(build_tiny_tokenizer()), seed=0).state_dict()
    after = load_policy(str(run / "model")).state_dict()
    assert any((before[k] - after[k]).abs().max() > 0 for k in before)  # it trained
    # rerun with --resume (after a kill tore a last line): the oracle set is reused and no step is repeated
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 99, "lo')
    again = CliRunner().invoke(app, ["sft", "-c", config, "--resume"])
    assert again.exit_code == 0, again.output
    assert [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] == rows
    # without --resume the finished run is never overwritten
    fresh = CliRunner().invoke(app, ["sft", "-c", config])
    assert fresh.exit_code == 2 and "pass --resume to continue it or set sft.run_dir" in fresh.output
    # a second pass added to the finished run: it continues from the first pass, which is not run again
    second = [f"sft.passes=[{{tasks = {json.dumps([_task_dir('train', 'text-head-lines')])}, lr = 1e-3}}]"]
    first = (run / "model").resolve()
    result = CliRunner().invoke(app, ["sft", "-c", config, *second, "--resume"])
    assert result.exit_code == 0, result.output
    final = (run / "model").resolve()
    assert final.parent == (run / "pass-2" / "checkpoints").resolve() and (final / "model.safetensors").exists()
    assert [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] == rows
    assert json.loads((run / "pass-2" / "sft_config.json").read_text())["sft"]["init_from"] == str(first)
    assert (run / "pass-2" / "metrics.jsonl").read_text().count("\n") >= 1
    before, after = load_policy(str(first)).state_dict(), load_policy(str(final)).state_dict()
    assert any((before[k] - after[k]).abs().max() > 0 for k in before)


def test_heldout_tasks_are_refused(tmp_path):
    config = _config(tmp_path, [_task_dir("heldout", "text-tail-lines")])
    result = CliRunner().invoke(app, ["sft", "-c", config])
    assert result.exit_code == 2
    assert "held-out tasks ['text-tail-lines']" in result.output


def _quick(tmp_path) -> list[str]:
    """Overrides under which a run that got past the run-directory checks would fail fast (no such model)."""
    return [f"sft.run_dir={tmp_path / 'run'}", f"sft.init_from={tmp_path / 'no-model'}",
            f"sft.tasks={json.dumps([_task_dir('train', 'text-uppercase')])}"]


def test_sft_without_resume_never_overwrites_an_earlier_run(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-000004").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("step-000004")
    (run / "metrics.jsonl").write_text('{"step": 4, "loss": 0.1}\n')
    result = CliRunner().invoke(app, ["sft", *_quick(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"RunDirInUse: {run} already holds a run (checkpoints/ and metrics.jsonl); pass "
                                     "--resume to continue it or set sft.run_dir to a new directory")
    assert (run / "metrics.jsonl").read_text() == '{"step": 4, "loss": 0.1}\n'
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "metrics.jsonl"]  # refused before any work


def test_sft_resume_without_a_checkpoint_stops_before_the_oracle_replays(tmp_path):
    result = CliRunner().invoke(app, ["sft", *_quick(tmp_path), "--resume"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"CheckpointError: no checkpoint under {tmp_path / 'run' / 'checkpoints'}; start without --resume"
    assert not (tmp_path / "run").exists()


def test_a_later_pass_with_heldout_tasks_is_refused_before_the_first_pass(tmp_path):
    later = [f"sft.passes=[{{tasks = {json.dumps([_task_dir('heldout', 'text-tail-lines')])}}}]"]
    result = CliRunner().invoke(app, ["sft", *_quick(tmp_path), *later])
    assert result.exit_code == 2, result.output
    assert "sft.passes[0].tasks" in result.output and "held-out tasks ['text-tail-lines']" in result.output
    assert not (tmp_path / "run").exists()
