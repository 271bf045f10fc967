"""Loading a Terminal-Bench-1 task directory (``task.yaml``, ``Dockerfile``, ``solution.sh``, ``run-tests.sh``,
``tests/``) → ``Task``; tests/ and run-tests.sh are staged together in the cache so ``/tests`` holds both."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import yaml

from fireflash.protocols import GraderSpec, Task, TaskLimits, cache_root
from fireflash.tasks.git_strip import KEEP_FIELD
from fireflash.tasks.paths import TaskPaths
from fireflash.tasks.task_environment import task_environment
from fireflash.tasks.task_fields import TaskLoadError, git_premise, need, str_list, typed


def _stage_tb1_tests(paths: TaskPaths) -> Path:
    """tests/ plus run-tests.sh in one cached directory, so ``/tests`` holds both at grading time."""
    digest = hashlib.sha256(paths.tb1_run_tests.read_bytes())
    files = sorted(p for p in paths.tests_dir.rglob("*") if p.is_file()) if paths.tests_dir.is_dir() else []
    for p in files:
        digest.update(p.relative_to(paths.root).as_posix().encode() + p.read_bytes())
    target = cache_root() / "tb1-tests" / digest.hexdigest()[:24]
    if not target.is_dir():
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        if paths.tests_dir.is_dir():
            shutil.copytree(paths.tests_dir, tmp, ignore=shutil.ignore_patterns("__pycache__"))
        tmp.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths.tb1_run_tests, tmp / "run-tests.sh")
        tmp.rename(target)
    return target


def load_terminal_bench(root: Path, images: bool = False) -> Task:
    """A Terminal-Bench-1 task directory (task.yaml, Dockerfile, solution.sh, run-tests.sh, tests/) → ``Task``.

    ``images``: as for ``load_harbor``.

    Raises:
        TaskLoadError: missing or unparsable task.yaml, no instruction, wrong field types, no
            run-tests.sh, or a Dockerfile that needs a container backend.
    """
    paths = TaskPaths(root)
    where = str(paths.tb1_config)
    try:
        config = yaml.safe_load(paths.tb1_config.read_text())
    except yaml.YAMLError as e:
        raise TaskLoadError(f"{where}: not valid YAML ({e})") from None
    need(isinstance(config, dict), f"{where}: expected a mapping with an 'instruction' key")
    instruction = typed(config, "instruction", str, where)
    need(bool(instruction and instruction.strip()), f"{where}: 'instruction' is missing or empty")
    need(
        paths.tb1_run_tests.is_file(),
        f"{paths.tb1_run_tests}: missing; Terminal-Bench tasks grade with run-tests.sh",
    )
    keep = typed(config, KEEP_FIELD, bool, where)
    environment, extra = task_environment(paths.tb1_dockerfile, root, {}, where, bool(keep), images)
    extra.update(git_premise(config, bool(keep), where))
    agent_timeout = typed(config, "max_agent_timeout_sec", (int, float), where)
    test_timeout = typed(config, "max_test_timeout_sec", (int, float), where)
    tags = str_list(config.get("tags"), f"{where} tags")
    meta: dict[str, Any] = {
        k: config[k] for k in ("difficulty", "category", "author_email", "parser_name") if k in config
    }
    meta.update(extra, tags=tags, format="terminal-bench")
    return Task(
        id=root.name,
        instruction=instruction.strip(),
        path=root,
        environment=environment,
        grader=GraderSpec(
            kind="tests", tests_dir=_stage_tb1_tests(paths), test_command="bash /tests/run-tests.sh"
        ),
        solution_path=paths.tb1_solution if paths.tb1_solution.is_file() else None,
        limits=TaskLimits(
            agent_timeout_sec=agent_timeout or TaskLimits().agent_timeout_sec,
            verifier_timeout_sec=test_timeout or TaskLimits().verifier_timeout_sec,
        ),
        metadata=meta,
    )
