"""The CLI's own behaviour: help, config errors as exit code 2 with the message, resolved config."""

import pytest
from typer.testing import CliRunner

from fireflash.cli import app
from fireflash.tasks.loader import DATA_DIR

pytestmark = pytest.mark.unit
runner = CliRunner()


def test_help_lists_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("doctor", "config", "model"):
        assert command in result.output


def test_bad_override_exits_2_with_field_path():
    result = runner.invoke(app, ["config", "show", "rl.max_staleness=-2"])
    assert result.exit_code == 2
    assert "rl.max_staleness = -2" in result.output


def test_config_show_applies_overrides():
    result = runner.invoke(app, ["config", "show", "-c", "configs/local.toml", "runtime.steps=9"])
    assert result.exit_code == 0
    assert "steps = 9" in result.output and 'name_or_path = "runs/sft/model"' in result.output
    assert 'init_from = "smollm2-135m"' in result.output  # the local recipe warms up the embedded model first


def test_train_errors_are_one_line_and_exit_2(tmp_path):
    result = runner.invoke(app, ["train", f"tracking.run_dir={tmp_path}", "tasks.paths=['/nonexistent']"])
    assert result.exit_code == 2 and "TaskLoadError" in result.output and "/nonexistent" in result.output
    result = runner.invoke(app, ["train", "-c", "configs/local.toml", f"tracking.run_dir={tmp_path}",
                                 "model.name_or_path=smollm2-135m", "--resume"])
    assert result.exit_code == 2 and "no checkpoint under" in result.output
    # the local recipe trains from the warm-up's output; before `fireflash sft` the error says how to make it
    result = runner.invoke(app, ["train", "-c", "configs/local.toml", f"tracking.run_dir={tmp_path}",
                                 f"model.name_or_path={tmp_path}/sft/model"])
    assert result.exit_code == 2 and "ModelNotFound" in result.output and "fireflash sft" in result.output


def test_train_dry_run_prints_the_plan(tmp_path):
    # here, without the cluster's model: the placement is printed, then what the real run would stop at
    result = runner.invoke(app, ["train", "-c", "configs/cluster.toml", "--dry-run"])
    assert "12 attempts" in result.output and "sglang" in result.output and "staleness ≤ 6" in result.output
    assert result.exit_code == 2 and _last_line(result).startswith("ModelNotFound: model '/models/your-model'")
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["train", "--dry-run", f"tracking.run_dir={run_dir}", f"model.name_or_path={_model(tmp_path)}"])
    assert result.exit_code == 0, result.output
    n_train = len(list((DATA_DIR / "train").iterdir()))
    assert f"ready: {n_train} tasks load; model {tmp_path / 'model'} found, no earlier run in {run_dir}" in _unwrapped(result)
    assert not run_dir.exists()


def _model(tmp_path) -> str:
    """A directory that passes for a model until something loads it (nothing below gets that far)."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return str(model)


def _last_line(result) -> str:
    return result.output.strip().splitlines()[-1].strip()


def _unwrapped(result) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def _files(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


REFUSED = [  # (overrides, the start of the one-line error)
    (["engine.kind=vllm"], "ConfigError: engine.kind = 'vllm' on runtime.backend = 'local' needs engine.url"),
    (["engine.kind=sglang"], "ConfigError: engine.kind = 'sglang' on runtime.backend = 'local' needs engine.url"),
    (["engine.weight_sync_timeout_sec=300", "engine.kind=sglang", "engine.url=http://127.0.0.1:9"],
     "ConfigError: engine.weight_sync_timeout_sec (300) must exceed engine.request_timeout_sec (600)"),
    (["tasks.pool_manifest={tmp}/pool.json"], "FileNotFoundError: {tmp}/pool.json: pool manifest not found"),
    (["model.name_or_path={tmp}/nothing"], "ModelNotFound: model '{tmp}/nothing'"),
    (["tasks.paths=[]"], "  tasks.paths = []: no task paths; give at least one task directory"),
    (["tasks.paths=['bundled:heldout']"], "HeldoutLeak: tasks.paths includes held-out tasks ['csv-group-average'"),
]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("overrides,error", REFUSED, ids=[r[0][0].split("=")[0] + "=" + r[0][0].split("=")[1][:8] for r in REFUSED])
def test_train_refuses_before_writing_the_run_dir(tmp_path, overrides, error, dry_run):
    run_dir = tmp_path / "run"
    overrides = [o.format(tmp=tmp_path) for o in overrides]
    result = runner.invoke(app, ["train", f"tracking.run_dir={run_dir}", f"model.name_or_path={_model(tmp_path)}",
                                 *overrides, *["--dry-run"] * dry_run])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert _last_line(result).startswith(error.format(tmp=tmp_path).strip()), result.output
    assert "Traceback" not in result.output and not run_dir.exists()


def test_train_on_heldout_tasks_needs_the_override(tmp_path):
    result = runner.invoke(app, ["train", "--dry-run", f"tracking.run_dir={tmp_path / 'run'}",
                                 f"model.name_or_path={_model(tmp_path)}", "tasks.paths=['bundled:heldout']"])
    assert result.exit_code == 2 and "or set tasks.allow_heldout=true to train on them anyway" in result.output
    result = runner.invoke(app, ["train", "--dry-run", f"tracking.run_dir={tmp_path / 'run'}",
                                 f"model.name_or_path={_model(tmp_path)}", "tasks.paths=['bundled:heldout']",
                                 "tasks.allow_heldout=true"])
    assert result.exit_code == 0 and "ready: 11 tasks load" in _unwrapped(result)


def _earlier_run(run_dir, checkpoint=True):
    if checkpoint:
        (run_dir / "checkpoints" / "step-000002").mkdir(parents=True)
        (run_dir / "checkpoints" / "step-000002" / "fireflash.json").write_text('{"step": 2}')
        (run_dir / "checkpoints" / "latest").write_text("step-000002")
    run_dir.mkdir(exist_ok=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (run_dir / "config.toml").write_text("# the earlier run's config\n")
    return _files(run_dir)


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_train_without_resume_never_overwrites_an_earlier_run(tmp_path, dry_run):
    run_dir = tmp_path / "run"
    before = _earlier_run(run_dir)
    result = runner.invoke(app, ["train", f"tracking.run_dir={run_dir}", f"model.name_or_path={_model(tmp_path)}",
                                 *["--dry-run"] * dry_run])
    assert result.exit_code == 2, result.output
    assert _last_line(result) == (f"RunDirInUse: {run_dir} already holds a run (checkpoints/ and metrics.jsonl); pass "
                                  "--resume to continue it or set tracking.run_dir to a new directory")
    assert _files(run_dir) == before


def test_train_refuses_metrics_without_a_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    before = _earlier_run(run_dir, checkpoint=False)
    result = runner.invoke(app, ["train", f"tracking.run_dir={run_dir}", f"model.name_or_path={_model(tmp_path)}"])
    assert result.exit_code == 2 and "no checkpoint to resume from" in result.output
    assert f"delete {run_dir / 'metrics.jsonl'} to start over" in result.output and _files(run_dir) == before
    result = runner.invoke(app, ["train", "--dry-run", "--resume", f"tracking.run_dir={run_dir}"])
    assert result.exit_code == 2 and _last_line(result).startswith("CheckpointError: no checkpoint under")


def test_config_that_is_not_utf8_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"[runtime]\nsteps = 3  # caf\xe9\n")
    result = runner.invoke(app, ["config", "show", "-c", str(bad)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert result.output.strip() == f"ConfigError: {bad}: not UTF-8 (byte 26 is 0xe9); save the file as UTF-8, as TOML requires"


UNCORRECTABLE_SAMPLING = [  # (overrides, the one-line error): log q is recorded before truncation (RECIPE.md §5)
    (["harness.sampling.top_p=0.9"],
     ("ConfigError: harness.sampling.top_p = 0.9: training rollouts must be drawn from the full softmax(logits / "
      "temperature); the local engine reports log q of softmax(logits / temperature) before top-p truncation "
      "(engines/sampling.py), so the trainer's importance ratios (TIS, score centering; RECIPE.md §5) would use the "
      "wrong q; set harness.sampling.top_p = 1.0 (only evaluation may truncate)")),
    (["harness.sampling.top_p=0.5", "engine.kind=sglang", "engine.url=http://127.0.0.1:9"],
     ("ConfigError: harness.sampling.top_p = 0.5: training rollouts must be drawn from the full softmax(logits / "
      "temperature); SGLang, and FireFlash's SGLang-compatible server, report log q")),
    (["harness.sampling.temperature=0"],
     ("ConfigError: harness.sampling.temperature = 0: training rollouts must be drawn from the full softmax(logits / "
      "temperature), and greedy tokens are not draws from the q the engine reports")),
]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("overrides,error", UNCORRECTABLE_SAMPLING, ids=["top_p", "top_p-sglang", "greedy"])
def test_train_refuses_sampling_the_trainer_cannot_correct(tmp_path, overrides, error, dry_run):
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["train", f"tracking.run_dir={run_dir}", f"model.name_or_path={_model(tmp_path)}",
                                 *overrides, *["--dry-run"] * dry_run])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert _last_line(result).startswith(error), result.output
    assert len(result.output.strip().splitlines()) == 1  # checked before the plan is printed
    assert "Traceback" not in result.output and not run_dir.exists()


def test_probe_refuses_what_training_refuses_and_eval_does_not(tmp_path):
    # probing measures pass rates under the training conditions (RECIPE.md §2); refused before any task loads
    result = runner.invoke(app, ["tasks", "probe", "/nonexistent", "harness.sampling.top_p=0.9"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert result.output.strip().startswith(
        "ConfigError: harness.sampling.top_p = 0.9: probing runs under the training conditions (RECIPE.md §2), and "
        "training rollouts must be drawn from the full softmax(logits / temperature); the local engine reports"
    ), result.output
    result = runner.invoke(app, ["eval", "/nonexistent", "harness.sampling.top_p=0.9"])
    assert result.exit_code == 2 and "ConfigError" not in result.output and "no tasks loaded" in result.output
