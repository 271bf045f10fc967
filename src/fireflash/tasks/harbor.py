"""Loading a Harbor task directory (``task.toml``, ``instruction.md``, ``environment/``, ``tests/test.sh``) → ``Task``;
Harbor features FireFlash cannot honour yet (steps, docker-compose, MCP servers, GPUs) are refused by name."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from fireflash.protocols import GraderSpec, Task, TaskLimits
from fireflash.tasks.git_strip import KEEP_FIELD
from fireflash.tasks.paths import TaskPaths
from fireflash.tasks.task_environment import task_environment
from fireflash.tasks.task_fields import TaskLoadError, git_premise, megabytes, need, str_list, typed

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")


def _refuse_unsupported(paths: TaskPaths, config: dict[str, Any], env_t: dict[str, Any], where: str) -> None:
    """Harbor features that change what a task is and that FireFlash cannot honour yet: a clear error naming the
    field or file, never a task that silently runs without them (issue 26)."""
    steps = config.get("steps")  # empty lists and tables, as Harbor writes them, ask for nothing
    need(
        not steps and not (paths.root / "steps").is_dir(),
        f"{where}: multi-step tasks ([[steps]] in task.toml, a steps/ directory) are not supported yet; "
        "split the task into single-step tasks or leave it out",
    )
    for name in COMPOSE_FILES:
        need(
            not (paths.environment_dir / name).is_file(),
            f"{paths.environment_dir / name}: docker-compose environments (several containers, sidecar services) "
            "are not supported yet; give the task one environment/Dockerfile or leave it out",
        )
    need(
        not env_t.get("mcp_servers"),
        f"{where} [environment] mcp_servers: MCP server sidecars are not supported yet; leave the task out",
    )
    gpus = typed(env_t, "gpus", int, f"{where} [environment]")
    need(not gpus, f"{where} [environment] gpus = {gpus}: GPUs in sandboxes are not supported yet; set gpus = 0")


def _env_table(table: dict[str, Any], where: str) -> dict[str, str]:
    """``[environment.env]``: variables every command of the task sees (agent, verifier), as strings."""
    env = typed(table, "env", dict, where) or {}
    for key, value in env.items():
        need(
            isinstance(value, str | int | float | bool) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) is not None,
            f"{where} env.{key} = {value!r}: expected NAME = \"string\" (a variable name and a scalar value)",
        )
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in env.items()}


def _user(table: dict[str, Any], where: str) -> str | None:
    """``user`` of an [agent] or [verifier] table: a name or uid (``name:group`` too), as Harbor takes it."""
    value = typed(table, "user", (str, int), where)
    need(value is None or str(value).strip() != "", f"{where}: user is empty; name a user of the image or omit it")
    return None if value is None else str(value).strip()


def load_harbor(root: Path, images: bool = False) -> Task:
    """A Harbor task directory (``TaskPaths``) → ``Task``.

    Args:
        images: keep a Dockerfile the host's userland cannot run for the task's image (see ``task_environment``).

    Raises:
        TaskLoadError: missing instruction.md / task.toml / tests/test.sh, unparsable TOML, wrong field types,
            or a Dockerfile that needs a container backend.
    """
    paths = TaskPaths(root)
    need(paths.instruction.is_file(), f"{paths.instruction}: missing; write the task's instruction there")
    instruction = paths.instruction.read_text(errors="replace").strip()
    need(bool(instruction), f"{paths.instruction}: empty; state what the agent must do")
    need(
        paths.config.is_file(), f"{paths.config}: missing; add task.toml with [agent] and [verifier] tables"
    )
    try:
        config = tomllib.loads(paths.config.read_text())
    except tomllib.TOMLDecodeError as e:
        raise TaskLoadError(f"{paths.config}: not valid TOML ({e})") from None
    tables = {}
    for name in ("agent", "verifier", "environment", "solution", "metadata"):
        tables[name] = config.get(name, {})
        need(isinstance(tables[name], dict), f"{paths.config}: [{name}] must be a table")
    where = str(paths.config)
    env_t, meta = tables["environment"], dict(tables["metadata"])
    _refuse_unsupported(paths, config, env_t, where)
    need(paths.test_script.is_file(), f"{paths.test_script}: missing; Harbor tasks grade with tests/test.sh")
    overrides = {
        "cpus": typed(env_t, "cpus", (int, float), f"{where} [environment]"),
        "allow_internet": typed(env_t, "allow_internet", bool, f"{where} [environment]"),
        "workdir": typed(env_t, "workdir", str, f"{where} [environment]"),
        "user": _user(tables["agent"], f"{where} [agent]"),
        "verifier_user": _user(tables["verifier"], f"{where} [verifier]"),
    }
    for key, alias in (("memory_mb", "memory"), ("storage_mb", "storage")):
        if key in env_t or alias in env_t:
            overrides[key] = megabytes(env_t.get(key, env_t.get(alias)), f"{where} [environment] {key}")
    keep = typed(env_t, KEEP_FIELD, bool, f"{where} [environment]")
    environment, extra = task_environment(
        paths.dockerfile, paths.environment_dir, overrides, where, bool(keep), images
    )
    extra.update(git_premise(env_t, bool(keep), f"{where} [environment]"))
    declared_env = _env_table(env_t, f"{where} [environment]")
    if declared_env:  # over the Dockerfile's ENV, as a container's run-time environment is
        environment = environment.model_copy(update={"env": {**environment.env, **declared_env}})
    docker_image = typed(env_t, "docker_image", str, f"{where} [environment]")
    if docker_image is not None:
        # it is the task's image (tasks/environments.py builds or pulls it); a loader without a sandbox config
        # runs tasks on the host's userland, which has nothing of a docker_image without a Dockerfile
        need(
            images or paths.dockerfile.is_file(),
            f"{where} [environment] docker_image = {docker_image!r}: the task's files come only from that image, "
            "and tasks loaded without a sandbox config run on the host's userland; load it with the sandbox config "
            "(fireflash tasks validate / train do) or add environment/Dockerfile",
        )
        extra["docker_image"] = docker_image
    agent_timeout = typed(tables["agent"], "timeout_sec", (int, float), f"{where} [agent]")
    verifier_timeout = typed(tables["verifier"], "timeout_sec", (int, float), f"{where} [verifier]")
    build_timeout = typed(env_t, "build_timeout_sec", (int, float), f"{where} [environment]")
    verifier_env = typed(tables["verifier"], "env", dict, f"{where} [verifier]") or {}
    prefix = "".join(f"{k}={shlex.quote(str(v))} " for k, v in verifier_env.items())
    kind = typed(meta, "grader", str, f"{where} [metadata]") or "tests"
    grader = GraderSpec(
        kind=kind,
        tests_dir=paths.tests_dir,
        test_command=f"{'env ' + prefix if prefix else ''}bash /tests/test.sh",
        fail_to_pass=str_list(meta.get("fail_to_pass"), f"{where} [metadata] fail_to_pass"),
        pass_to_pass=str_list(meta.get("pass_to_pass"), f"{where} [metadata] pass_to_pass"),
    )
    need(
        kind != "swe" or bool(grader.fail_to_pass),
        f"{where} [metadata] fail_to_pass: the 'swe' grader needs at least one test id",
    )
    if "expected_checks" in meta:
        meta["expected_checks"] = str_list(meta["expected_checks"], f"{where} [metadata] expected_checks")
    meta.update(extra, format="harbor")
    if build_timeout is not None:
        meta["build_timeout_sec"] = float(build_timeout)
    solution_env = typed(tables["solution"], "env", dict, f"{where} [solution]")
    if solution_env:
        meta["solution_env"] = {str(k): str(v) for k, v in solution_env.items()}
    limits = TaskLimits(
        agent_timeout_sec=agent_timeout or TaskLimits().agent_timeout_sec,
        verifier_timeout_sec=verifier_timeout or TaskLimits().verifier_timeout_sec,
        max_turns=typed(tables["agent"], "max_turns", int, f"{where} [agent]"),
    )
    return Task(
        id=root.name,
        instruction=instruction,
        path=root,
        environment=environment,
        grader=grader,
        solution_path=paths.solve_script if paths.solve_script.is_file() else None,
        limits=limits,
        metadata=meta,
    )
