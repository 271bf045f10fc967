"""`fireflash tasks validate|fuzz`: bad paths and options are one line and exit 2, before any gate or sandbox runs."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fireflash.cli.tasks import app

pytestmark = pytest.mark.unit
TASK = str(Path(__file__).parent / "fixtures" / "gates" / "valid-sort")


def _refused(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # typer.Exit: no traceback
    assert result.output.strip() == message


@pytest.mark.parametrize("command", ["validate", "fuzz"])
def test_a_directory_without_tasks_is_refused(tmp_path, command):
    (tmp_path / "empty").mkdir()
    message = (f"no tasks found under {tmp_path / 'empty'}: a task is a directory holding task.toml (Harbor) or "
               "task.yaml (Terminal-Bench 1); pass task directories, directories of them, or bundled:train")
    _refused(CliRunner().invoke(app, [command, str(tmp_path / "empty")]), message)
    # beside a real task too: a mistyped path is not skipped while the others run
    _refused(CliRunner().invoke(app, [command, TASK, str(tmp_path / "empty"), *["--gates", "2"] * (command == "validate")]),
             message)


@pytest.mark.parametrize("args,message", [
    (["--cold-starts", "0"], "--cold-starts 0: Input should be greater than or equal to 1"),
    (["--determinism-repeats", "0"], "--determinism-repeats 0: Input should be greater than or equal to 2"),
    (["--fuzz-cases", "-3"], "--fuzz-cases -3: Input should be greater than or equal to 1"),
    (["--backend", "docker"], "--backend docker: Input should be 'bwrap' or 'unsafe-local'"),
    (["--gates", "1,12"], "--gates '1,12': gates are 1..9"),
])
def test_validate_option_errors_name_the_option(args, message):
    _refused(CliRunner().invoke(app, ["validate", TASK, *args]), message)


@pytest.mark.parametrize("args,message", [
    (["--cases", "0"], "--cases 0: must be at least 1"),
    (["--repeats", "0"], "--repeats 0: must be at least 1"),
    (["--backend", "docker"], "--backend docker: Input should be 'bwrap' or 'unsafe-local'"),
])
def test_fuzz_option_errors_name_the_option(args, message):
    _refused(CliRunner().invoke(app, ["fuzz", TASK, *args]), message)


def test_an_unwritable_report_dir_is_refused_before_the_gates(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    result = CliRunner().invoke(app, ["validate", TASK, "--report-dir", str(a_file)])
    _refused(result, f"--report-dir {a_file}: {a_file} is a file, not a directory; pass a writable directory")
    result = CliRunner().invoke(app, ["validate", TASK, "--report-dir", str(a_file / "reports")])
    _refused(result, f"--report-dir {a_file / 'reports'}: cannot write into {a_file / 'reports'} (Not a directory); "
                     "pass a writable directory")
    result = CliRunner().invoke(app, ["fuzz", TASK, "--report", str(a_file / "summary.json")])
    _refused(result, f"--report {a_file / 'summary.json'}: {a_file} is a file, not a directory; pass a writable directory")
