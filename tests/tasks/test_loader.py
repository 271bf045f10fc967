"""Loading Harbor and Terminal-Bench-1 task directories unchanged; bad directories name file and field."""

import shutil
from pathlib import Path

import pytest

from fireflash.tasks.git_strip import STRIP_GIT
from fireflash.tasks.loader import TaskLoadError, bundled_tasks, load_task, load_tasks

pytestmark = pytest.mark.unit
EXTERNAL = Path(__file__).parent / "fixtures" / "external"


def test_harbor_examples_load():
    hello = load_task(EXTERNAL / "harbor" / "hello-file")
    assert hello.id == "hello-file" and "hello.txt" in hello.instruction
    assert (hello.limits.agent_timeout_sec, hello.limits.verifier_timeout_sec) == (120.0, 120.0)
    assert (hello.environment.workdir, hello.environment.memory_mb, hello.environment.storage_mb) == (
        "/app",
        2048,
        10240,
    )
    assert hello.grader.kind == "tests" and hello.grader.test_command == "bash /tests/test.sh"
    assert hello.solution_path.name == "solve.sh" and hello.metadata["difficulty"] == "easy"

    dedupe = load_task(EXTERNAL / "harbor" / "csv-dedupe")
    env = dedupe.environment
    assert env.workdir == "/srv/export" and (env.cpus, env.memory_mb, env.storage_mb) == (2, 1024, 2048)
    assert env.env == {"EXPORT_DIR": "/srv/export", "PYTHONUNBUFFERED": "1"}
    assert (env.files_dir / "customers.csv").is_file()
    assert env.setup_commands[-2:] == [
        "cd /srv/export && mkdir -p archive && cp customers.csv archive/customers.orig.csv",
        STRIP_GIT,  # git history beyond HEAD is stripped last, after the task's own setup
    ]
    assert dedupe.grader.test_command == "env EXPECTED_ROWS=4 bash /tests/test.sh"

    words = load_task(EXTERNAL / "harbor" / "word-stats")
    assert words.environment.workdir == "/workspace"
    assert words.environment.env["PATH"].startswith("/workspace/.venv/bin:")
    assert any("pip install --no-index" in c for c in words.environment.setup_commands)


def test_terminal_bench_examples_load():
    greeting = load_task(EXTERNAL / "tb1" / "greeting-file")
    assert greeting.metadata["format"] == "terminal-bench" and greeting.instruction.endswith("hi there")
    assert (greeting.limits.agent_timeout_sec, greeting.limits.verifier_timeout_sec) == (180.0, 30.0)
    assert greeting.grader.test_command == "bash /tests/run-tests.sh"
    assert {p.name for p in greeting.grader.tests_dir.iterdir()} == {"run-tests.sh", "test_outputs.py"}
    assert greeting.solution_path.name == "solution.sh"

    config = load_task(EXTERNAL / "tb1" / "fix-json-config")
    assert (config.environment.files_dir / "config.json").read_text().startswith("{\n  'name'")
    assert config.metadata["tags"] == ["json", "debugging"]

    loc = load_task(EXTERNAL / "tb1" / "count-python-lines")
    assert (loc.environment.files_dir / "src" / "pkg" / "consts.py").is_file()
    assert (loc.grader.tests_dir / "expected_loc.txt").is_file()


def copy_task(tmp_path, name="hello-file"):
    target = tmp_path / name
    shutil.copytree(EXTERNAL / "harbor" / "hello-file", target)
    return target


@pytest.mark.parametrize(
    "breakage,match",
    [
        (lambda d: (d / "instruction.md").unlink(), r"instruction\.md: missing"),
        (lambda d: (d / "instruction.md").write_text("  \n"), r"instruction\.md: empty"),
        (lambda d: (d / "task.toml").write_text("[agent\ntimeout_sec = 1"), r"task\.toml: not valid TOML"),
        (lambda d: shutil.rmtree(d / "tests"), r"tests/test\.sh: missing"),
        (
            lambda d: (d / "task.toml").write_text('[agent]\ntimeout_sec = "slow"\n'),
            r"task\.toml \[agent\]: timeout_sec = 'slow' must be",
        ),
        (
            lambda d: (d / "task.toml").write_text('[environment]\nallow_internet = "no"\n'),
            r"allow_internet = 'no' must be bool",
        ),
        (lambda d: (d / "task.toml").write_text('[environment]\nmemory = "lots"\n'), r"memory_mb = 'lots'"),
        (lambda d: (d / "task.toml").write_text("agent = 3\n"), r"\[agent\] must be a table"),
        (
            lambda d: (d / "task.toml").write_text('[metadata]\ngrader = "swe"\n'),
            r"fail_to_pass: the 'swe' grader",
        ),
        (
            lambda d: (d / "environment" / "Dockerfile").write_text("FROM alpine:3.19\n"),
            r"Dockerfile:1: FROM alpine",
        ),
    ],
)
def test_bad_task_directories_name_file_and_field(tmp_path, breakage, match):
    task_dir = copy_task(tmp_path)
    breakage(task_dir)
    with pytest.raises(TaskLoadError, match=match):
        load_task(task_dir)


def test_agent_and_verifier_users_are_read_as_harbor_writes_them(tmp_path):
    task_dir = copy_task(tmp_path)
    config = (task_dir / "task.toml").read_text()
    (task_dir / "task.toml").write_text(
        config.replace("[agent]", '[agent]\nuser = "app"').replace("[verifier]", "[verifier]\nuser = 0")
    )
    env = load_task(task_dir).environment
    assert (env.user, env.verifier_user) == ("app", "0")
    (task_dir / "task.toml").write_text('[agent]\nuser = ""\n')
    with pytest.raises(TaskLoadError, match=r"\[agent\]: user is empty"):
        load_task(task_dir)
    (task_dir / "task.toml").write_text("[verifier]\nuser = 1.5\n")
    with pytest.raises(TaskLoadError, match=r"\[verifier\]: user = 1.5 must be str/int"):
        load_task(task_dir)


def test_bad_terminal_bench_yaml(tmp_path):
    target = tmp_path / "t"
    shutil.copytree(EXTERNAL / "tb1" / "greeting-file", target)
    (target / "task.yaml").write_text("instruction: [1, 2]\n")
    with pytest.raises(TaskLoadError, match=r"task\.yaml: instruction = \[1, 2\] must be str"):
        load_task(target)
    (target / "task.yaml").write_text("instruction: 'a\n")
    with pytest.raises(TaskLoadError, match="not valid YAML"):
        load_task(target)


def test_load_tasks_reports_each_bad_task_and_loads_the_rest(tmp_path):
    for name in ("good-a", "bad-b", "good-c", "bad-d"):
        copy_task(tmp_path, name)
    (tmp_path / "bad-b" / "instruction.md").unlink()
    (tmp_path / "bad-d" / "task.toml").write_text("[[[")
    tasks, errors = load_tasks([tmp_path, tmp_path / "missing-dir", "bundled:nope"])
    assert [t.id for t in tasks] == ["good-a", "good-c"]
    assert len(errors) == 4
    assert "bad-b/instruction.md: missing" in errors[0] and "bad-d/task.toml" in errors[1]
    assert "missing-dir: no such directory" in errors[2] and "unknown bundled split" in errors[3]


def test_bundled_sets():
    train, heldout = bundled_tasks("train"), bundled_tasks("heldout")
    tasks = train + heldout
    assert len(tasks) >= 40 and len(heldout) >= 8
    assert not {t.id for t in train} & {t.id for t in heldout}
    categories = {t.metadata["category"] for t in tasks}
    assert categories == {
        "file-manipulation",
        "text-processing",
        "csv-json",
        "log-analysis",
        "shell-scripting",
        "python-scripts",
        "git",
        "software-engineering",
    }
    swe = [t for t in tasks if t.grader.kind == "swe"]
    assert len(swe) >= 10 and all(t.grader.fail_to_pass and t.grader.pass_to_pass for t in swe)
    assert sum(t.metadata["tier"] == 1 for t in tasks) >= 12
    assert {t.metadata["tier"] for t in tasks} == {1, 2, 3}
    assert all(t.solution_path is not None and not t.environment.allow_internet for t in tasks)
    assert {t.metadata["split"] for t in heldout} == {"heldout"}
