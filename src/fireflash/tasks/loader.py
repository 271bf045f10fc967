"""Load task directories in the formats people already have: Harbor and Terminal-Bench 1.

    task = load_task("path/to/task")                  # one directory → fireflash.protocols.Task
    tasks, errors = load_tasks(["bundled:train", "my-tasks/"])   # never stops at the first bad task
    tasks, errors = load_tasks(paths, sandbox=cfg.sandbox)       # tasks that need it run in their image

Without ``sandbox`` every task runs on the host's userland (its Dockerfile materialised), and one that
cannot is a load error. With it, ``sandbox.task_images`` decides which tasks run in their own image
(tasks/environments.py), built on first use.

A path holding ``task.toml`` is a Harbor task, one holding ``task.yaml`` a Terminal-Bench-1 task; any
other directory is searched one level down for tasks. Bad directories raise ``TaskLoadError`` naming
the file and field and how to fix it (RECIPE.md §3: broken tasks must not enter the pool silently).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fireflash.protocols import GraderSpec, Task, TaskEnvironment, TaskLimits, cache_root
from fireflash.sandbox.config import SandboxConfig
from fireflash.tasks.dockerfile import NeedsContainerBackend, materialise_dockerfile
from fireflash.tasks.git_strip import KEEP_FIELD, PREMISE_FIELD, PREMISE_KINDS, STRIP_GIT
from fireflash.tasks.paths import TaskPaths

DATA_DIR = Path(__file__).parent / "data"
SPLITS = ("train", "heldout")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


class TaskLoadError(ValueError):
    """A task directory is malformed; the message names the file, the field and the fix."""


class HeldoutLeak(ValueError):
    """Tasks to train on include held-out tasks (they must never be trained on)."""


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise TaskLoadError(message)


def _typed(table: dict[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    value = table.get(key)
    if value is None:
        return None
    bad = isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,))
    if bad or not isinstance(value, kinds):
        names = "/".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
        raise TaskLoadError(f"{where}: {key} = {value!r} must be {names}")
    return value


def _megabytes(value: Any, where: str) -> int:
    """Harbor's ``memory``/``storage`` strings ('2G', '512M') or a number of MiB → MiB."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    m = _SIZE.match(str(value))
    _need(m is not None, f"{where} = {value!r}: expected MiB as a number or a size like '2G' / '512M'")
    number, unit = float(m[1]), m[2].lower()
    return int(number * {"": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}[unit])


def _str_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    _need(
        isinstance(value, list) and all(isinstance(v, str) for v in value),
        f"{where} must be a list of strings",
    )
    return list(value)


def _environment(
    dockerfile: Path,
    context: Path,
    overrides: dict[str, Any],
    where: str,
    keep_git_history: bool = False,
    images: bool = False,
) -> tuple[TaskEnvironment, dict[str, Any]]:
    """The task's environment on the host's userland (its Dockerfile materialised), and metadata; its last
    setup command strips git history beyond HEAD (``git_strip``) unless the task sets ``keep_git_history``,
    which ``extra`` then records for gate 5.

    Args:
        images: a Dockerfile that cannot be materialised is kept for its image (``TaskEnvironment.dockerfile``
            set, the reason in ``metadata['host_userland']``) instead of failing the load.
    """
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if dockerfile.is_file():
        try:
            docker = materialise_dockerfile(dockerfile, context)
        except NeedsContainerBackend as e:
            if not images:
                raise TaskLoadError(f"needs a container backend: {e}") from None
            fields.update(dockerfile=dockerfile)
            extra.update(dockerfile=str(dockerfile), host_userland=str(e))
        else:
            fields.update(
                workdir=docker.workdir if docker.workdir != "/" else "/app",
                files_dir=docker.files_dir,
                setup_commands=docker.setup_commands,
                env=docker.env,
            )
            extra.update(dockerfile=str(dockerfile), base_image=docker.base_image)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    if keep_git_history:
        extra[KEEP_FIELD] = True
    else:
        fields["setup_commands"] = [*fields.get("setup_commands", []), STRIP_GIT]
    try:
        return TaskEnvironment(**fields), extra
    except ValidationError as e:
        raise TaskLoadError(f"{where}: {e.errors()[0]['loc'][0]}: {e.errors()[0]['msg']}") from None


def _premise(table: dict[str, Any], keep: bool, where: str) -> dict[str, Any]:
    """``git_premise``: the kinds of kept git history the task is built on (tasks/git_strip.py) → metadata."""
    kinds = _str_list(table.get(PREMISE_FIELD), f"{where}: {PREMISE_FIELD}")
    bad = [k for k in kinds if k not in PREMISE_KINDS]
    _need(not bad, f"{where}: {PREMISE_FIELD} = {kinds!r}: unknown kind(s) {bad}; use {list(PREMISE_KINDS)}")
    _need(
        not kinds or keep,
        f"{where}: {PREMISE_FIELD} is set but {KEEP_FIELD} is not true: history is stripped, so there is no premise "
        f"to keep; set {KEEP_FIELD} = true too, or drop {PREMISE_FIELD}",
    )
    return {PREMISE_FIELD: kinds} if kinds else {}


COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")


def _refuse_unsupported(paths: TaskPaths, config: dict[str, Any], env_t: dict[str, Any], where: str) -> None:
    """Harbor features that change what a task is and that FireFlash cannot honour yet: a clear error naming the
    field or file, never a task that silently runs without them (issue 26)."""
    steps = config.get("steps")  # empty lists and tables, as Harbor writes them, ask for nothing
    _need(
        not steps and not (paths.root / "steps").is_dir(),
        f"{where}: multi-step tasks ([[steps]] in task.toml, a steps/ directory) are not supported yet; "
        "split the task into single-step tasks or leave it out",
    )
    for name in COMPOSE_FILES:
        _need(
            not (paths.environment_dir / name).is_file(),
            f"{paths.environment_dir / name}: docker-compose environments (several containers, sidecar services) "
            "are not supported yet; give the task one environment/Dockerfile or leave it out",
        )
    _need(
        not env_t.get("mcp_servers"),
        f"{where} [environment] mcp_servers: MCP server sidecars are not supported yet; leave the task out",
    )
    gpus = _typed(env_t, "gpus", int, f"{where} [environment]")
    _need(not gpus, f"{where} [environment] gpus = {gpus}: GPUs in sandboxes are not supported yet; set gpus = 0")


def _env_table(table: dict[str, Any], where: str) -> dict[str, str]:
    """``[environment.env]``: variables every command of the task sees (agent, verifier), as strings."""
    env = _typed(table, "env", dict, where) or {}
    for key, value in env.items():
        _need(
            isinstance(value, str | int | float | bool) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) is not None,
            f"{where} env.{key} = {value!r}: expected NAME = \"string\" (a variable name and a scalar value)",
        )
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in env.items()}


def _user(table: dict[str, Any], where: str) -> str | None:
    """``user`` of an [agent] or [verifier] table: a name or uid (``name:group`` too), as Harbor takes it."""
    value = _typed(table, "user", (str, int), where)
    _need(value is None or str(value).strip() != "", f"{where}: user is empty; name a user of the image or omit it")
    return None if value is None else str(value).strip()


def load_harbor(root: Path, images: bool = False) -> Task:
    """A Harbor task directory (``TaskPaths``) → ``Task``.

    Args:
        images: keep a Dockerfile the host's userland cannot run for the task's image (see ``_environment``).

    Raises:
        TaskLoadError: missing instruction.md / task.toml / tests/test.sh, unparsable TOML, wrong field types,
            or a Dockerfile that needs a container backend.
    """
    paths = TaskPaths(root)
    _need(paths.instruction.is_file(), f"{paths.instruction}: missing; write the task's instruction there")
    instruction = paths.instruction.read_text(errors="replace").strip()
    _need(bool(instruction), f"{paths.instruction}: empty; state what the agent must do")
    _need(
        paths.config.is_file(), f"{paths.config}: missing; add task.toml with [agent] and [verifier] tables"
    )
    try:
        config = tomllib.loads(paths.config.read_text())
    except tomllib.TOMLDecodeError as e:
        raise TaskLoadError(f"{paths.config}: not valid TOML ({e})") from None
    tables = {}
    for name in ("agent", "verifier", "environment", "solution", "metadata"):
        tables[name] = config.get(name, {})
        _need(isinstance(tables[name], dict), f"{paths.config}: [{name}] must be a table")
    where = str(paths.config)
    env_t, meta = tables["environment"], dict(tables["metadata"])
    _refuse_unsupported(paths, config, env_t, where)
    _need(paths.test_script.is_file(), f"{paths.test_script}: missing; Harbor tasks grade with tests/test.sh")
    overrides = {
        "cpus": _typed(env_t, "cpus", (int, float), f"{where} [environment]"),
        "allow_internet": _typed(env_t, "allow_internet", bool, f"{where} [environment]"),
        "workdir": _typed(env_t, "workdir", str, f"{where} [environment]"),
        "user": _user(tables["agent"], f"{where} [agent]"),
        "verifier_user": _user(tables["verifier"], f"{where} [verifier]"),
    }
    for key, alias in (("memory_mb", "memory"), ("storage_mb", "storage")):
        if key in env_t or alias in env_t:
            overrides[key] = _megabytes(env_t.get(key, env_t.get(alias)), f"{where} [environment] {key}")
    keep = _typed(env_t, KEEP_FIELD, bool, f"{where} [environment]")
    environment, extra = _environment(
        paths.dockerfile, paths.environment_dir, overrides, where, bool(keep), images
    )
    extra.update(_premise(env_t, bool(keep), f"{where} [environment]"))
    declared_env = _env_table(env_t, f"{where} [environment]")
    if declared_env:  # over the Dockerfile's ENV, as a container's run-time environment is
        environment = environment.model_copy(update={"env": {**environment.env, **declared_env}})
    docker_image = _typed(env_t, "docker_image", str, f"{where} [environment]")
    if docker_image is not None:
        # it is the task's image (tasks/environments.py builds or pulls it); a loader without a sandbox config
        # runs tasks on the host's userland, which has nothing of a docker_image without a Dockerfile
        _need(
            images or paths.dockerfile.is_file(),
            f"{where} [environment] docker_image = {docker_image!r}: the task's files come only from that image, "
            "and tasks loaded without a sandbox config run on the host's userland; load it with the sandbox config "
            "(fireflash tasks validate / train do) or add environment/Dockerfile",
        )
        extra["docker_image"] = docker_image
    agent_timeout = _typed(tables["agent"], "timeout_sec", (int, float), f"{where} [agent]")
    verifier_timeout = _typed(tables["verifier"], "timeout_sec", (int, float), f"{where} [verifier]")
    build_timeout = _typed(env_t, "build_timeout_sec", (int, float), f"{where} [environment]")
    verifier_env = _typed(tables["verifier"], "env", dict, f"{where} [verifier]") or {}
    prefix = "".join(f"{k}={shlex.quote(str(v))} " for k, v in verifier_env.items())
    kind = _typed(meta, "grader", str, f"{where} [metadata]") or "tests"
    grader = GraderSpec(
        kind=kind,
        tests_dir=paths.tests_dir,
        test_command=f"{'env ' + prefix if prefix else ''}bash /tests/test.sh",
        fail_to_pass=_str_list(meta.get("fail_to_pass"), f"{where} [metadata] fail_to_pass"),
        pass_to_pass=_str_list(meta.get("pass_to_pass"), f"{where} [metadata] pass_to_pass"),
    )
    _need(
        kind != "swe" or bool(grader.fail_to_pass),
        f"{where} [metadata] fail_to_pass: the 'swe' grader needs at least one test id",
    )
    if "expected_checks" in meta:
        meta["expected_checks"] = _str_list(meta["expected_checks"], f"{where} [metadata] expected_checks")
    meta.update(extra, format="harbor")
    if build_timeout is not None:
        meta["build_timeout_sec"] = float(build_timeout)
    solution_env = _typed(tables["solution"], "env", dict, f"{where} [solution]")
    if solution_env:
        meta["solution_env"] = {str(k): str(v) for k, v in solution_env.items()}
    limits = TaskLimits(
        agent_timeout_sec=agent_timeout or TaskLimits().agent_timeout_sec,
        verifier_timeout_sec=verifier_timeout or TaskLimits().verifier_timeout_sec,
        max_turns=_typed(tables["agent"], "max_turns", int, f"{where} [agent]"),
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
    _need(isinstance(config, dict), f"{where}: expected a mapping with an 'instruction' key")
    instruction = _typed(config, "instruction", str, where)
    _need(bool(instruction and instruction.strip()), f"{where}: 'instruction' is missing or empty")
    _need(
        paths.tb1_run_tests.is_file(),
        f"{paths.tb1_run_tests}: missing; Terminal-Bench tasks grade with run-tests.sh",
    )
    keep = _typed(config, KEEP_FIELD, bool, where)
    environment, extra = _environment(paths.tb1_dockerfile, root, {}, where, bool(keep), images)
    extra.update(_premise(config, bool(keep), where))
    agent_timeout = _typed(config, "max_agent_timeout_sec", (int, float), where)
    test_timeout = _typed(config, "max_test_timeout_sec", (int, float), where)
    tags = _str_list(config.get("tags"), f"{where} tags")
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


def is_task_dir(path: Path) -> bool:
    return (
        (path / "task.toml").is_file()
        or (path / "task.yaml").is_file()
        or (path / "instruction.md").is_file()
    )


def load_task(path: str | Path, sandbox: SandboxConfig | None = None, say: Callable[[str], None] = print) -> Task:
    """One task directory, Harbor (task.toml) or Terminal-Bench 1 (task.yaml) → ``Task``.

    Args:
        sandbox: when given, ``sandbox.task_images`` decides whether the task runs in its image
            (tasks/environments.py; the image is built now if it is not yet local). None: host userland only.
        say: receives the lines the user must see (an image built, a base substituted).

    Raises:
        TaskLoadError: not a directory, neither format, or malformed (the message names file and field); or
            the task needs its image and it cannot be had (no container tool, a failed build).
    """
    root = Path(path).resolve()
    _need(root.is_dir(), f"{root}: not a directory; pass a task directory holding task.toml or task.yaml")
    images = sandbox is not None
    if (root / "task.yaml").is_file() and not (root / "task.toml").is_file():
        task = load_terminal_bench(root, images)
    else:
        task = load_harbor(root, images)
    if sandbox is None:
        return task
    from fireflash.tasks.environments import place  # it builds images: imported only when asked to

    return place(task, sandbox, say)


def _expand(spec: str | Path) -> list[Path]:
    text = str(spec)
    if text.startswith("bundled:"):
        split = text.removeprefix("bundled:")
        _need(
            split in SPLITS,
            f"{text}: unknown bundled split; use one of {', '.join('bundled:' + s for s in SPLITS)}",
        )
        return sorted(p for p in (DATA_DIR / split).iterdir() if p.is_dir())
    if text.startswith("generated:"):
        return _generated(text)
    path = Path(text)
    if is_task_dir(path):
        return [path]
    _need(path.is_dir(), f"{path}: no such directory")
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def task_dirs(spec: str | Path) -> list[Path]:
    """The task directories ``spec`` names (as in ``load_tasks``), without loading them.

    Raises:
        TaskLoadError: an unknown bundled split, a bad 'generated:' spec, or no such directory.
    """
    return _expand(spec)


def _generated(text: str) -> list[Path]:
    """'generated:N', 'generated:N:SEED' or 'generated:N:SEED:FAMILY,FAMILY,...' → N instances of every task
    family (tasks/families/), or of the named ones, written once under the cache directory and reused.
    Instance k of a family is the same task whichever families are named, so a filtered source extends
    an unfiltered one with the same seed (its first instances keep their ids and probe results)."""
    from fireflash.tasks.families.writer import write_tasks

    parts = text.split(":")[1:]
    ok = len(parts) in (1, 2, 3) and all(p.isdigit() for p in parts[:2]) and int(parts[0]) > 0
    families = sorted({f.strip() for f in parts[2].split(",") if f.strip()}) if len(parts) == 3 else []
    ok = ok and (len(parts) < 3 or bool(families))
    _need(ok, f"{text}: expected 'generated:N', 'generated:N:SEED' or 'generated:N:SEED:FAMILY,...' with N > 0 "
              "instances per family")
    per_family, seed = int(parts[0]), int(parts[1]) if len(parts) >= 2 else 0
    name = f"n{per_family}-s{seed}"
    if families:
        name += "-f" + hashlib.sha256(",".join(families).encode()).hexdigest()[:12]
    try:
        return write_tasks(per_family, cache_root() / "generated" / name, seed, families)
    except ValueError as e:  # an unknown family name
        raise TaskLoadError(f"{text}: {e}") from None


def load_tasks(
    paths: list[str | Path],
    sandbox: SandboxConfig | None = None,
    say: Callable[[str], None] = print,
    only: set[str] | None = None,
) -> tuple[list[Task], list[str]]:
    """Load every task under ``paths`` (task dirs, dirs of tasks, 'bundled:SPLIT', or
    'generated:N[:SEED[:FAMILY,...]]', N instances of each (or each named) generated task family,
    ``fireflash.tasks.families``). ``sandbox`` and ``say``: as for ``load_task``; ``only``: skip task
    directories whose name (a task's id) is not in it, before loading (no image is built for them).

    Returns:
        (tasks, errors): one error string per bad task or path; the good ones load regardless.
    """
    tasks: list[Task] = []
    errors: list[str] = []
    for spec in paths:
        try:
            dirs = _expand(spec)
        except TaskLoadError as e:
            errors.append(str(e))
            continue
        split = str(spec).removeprefix("bundled:") if str(spec).startswith("bundled:") else None
        for d in dirs:
            if only is not None and d.name not in only:
                continue
            try:
                task = load_task(d, sandbox, say)
            except TaskLoadError as e:
                errors.append(str(e))
                continue
            if split:
                task.metadata["split"] = split
            tasks.append(task)
    return tasks, errors


def bundled_tasks(split: str) -> list[Task]:
    """The tasks shipped with FireFlash for ``split`` ('train' or 'heldout'), with ``metadata['split']`` set.

    Raises:
        TaskLoadError: unknown split, or a bundled task is malformed (a packaging bug).
    """
    tasks, errors = load_tasks([f"bundled:{split}"])
    if errors:
        raise TaskLoadError("bundled tasks are broken:\n" + "\n".join(errors))
    return tasks


def check_not_heldout(tasks: list[Task], field: str, allow_with: str | None = None) -> None:
    """Raise ``HeldoutLeak`` naming the tasks if any id or path belongs to the bundled held-out split.

    Args:
        field: the config field the tasks came from (``sft.tasks``, ``tasks.paths``), named in the message.
        allow_with: the override that permits it (``tasks.allow_heldout=true``), offered in the message; None
            when nothing does.
    """
    heldout = bundled_tasks("heldout")
    ids = {t.id for t in heldout}
    paths = {t.path.resolve() for t in heldout if t.path}
    leaked = sorted(t.id for t in tasks if t.id in ids or (t.path and t.path.resolve() in paths))
    if leaked:
        fix = "use bundled:train or your own training tasks"
        fix += f", or set {allow_with} to train on them anyway" if allow_with else ""
        raise HeldoutLeak(f"{field} includes held-out tasks {leaked}; {fix}")
