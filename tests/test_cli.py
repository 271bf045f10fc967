"""The CLI's own behaviour: help, config errors as exit code 2 with the message, resolved config."""

import pytest
from typer.testing import CliRunner

from fireflash.cli import app

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


def test_train_dry_run_prints_the_plan():
    result = runner.invoke(app, ["train", "-c", "configs/cluster.toml", "--dry-run"])
    assert result.exit_code == 0
    assert "12 attempts" in result.output and "sglang" in result.output and "staleness ≤ 6" in result.output
