"""Run a task's tests on a fork of an attempt's final state and collect what they report.

    output = await run_verifier(task, attempt_sandbox)   # the attempt's sandbox is left untouched

What is guaranteed (issue 27; RECIPE.md §3: the score must come from a process the attempt cannot program):

- **No process of the attempt takes part.** Grading runs in ``sandbox.fork()``, which has the attempt's
  files but fresh processes (``Sandbox.fork``): a server, watcher or rewriter the agent left running is
  not in the fork and cannot see its files.
- **No network** (issue 26, network by phase). The fork is offline even when the attempt was online (a
  task's ``allow_internet`` under ``sandbox.allow_internet``: ``grading_fork`` asks for ``offline``).
- **The grader's files are fresh.** ``/tests`` and ``/logs/verifier`` are emptied and recreated in the fork,
  the tests (runner included) are written from the task's own directory on the host after the attempt
  ended, and the listing check proves nothing the agent planted (report, symlink, test) survives.
- **A clean start-up environment.** The test command runs under ``env -i`` with ``PATH`` the system
  directories first (``SYSTEM_PATH``, then any the task's own ``PATH`` adds), ``HOME`` a new
  directory in the fork's fresh ``/tmp`` (empty, or holding only the staged tools' entries, below), no ``PYTHONPATH``/``PYTHONSTARTUP``/``BASH_ENV``/``LD_PRELOAD``
  or anything else from the agent's shell, ``PYTHONNOUSERSITE=1`` and bash without start-up files: the
  agent's ``~/.bashrc``, ``~/.profile``, ``~/.local/.../usercustomize.py``, user-site ``.pth`` files and
  exported variables are never read. Only the task's declared environment (``TaskEnvironment.env``) and
  the verifier's own variables are set. The verifier's own commands in the fork (reset, listing, kill)
  run with ``PATH=SYSTEM_PATH``, so no program the agent wrote stands in for ``find``, ``ls`` or ``stat``.
- **Staged tools the agent cannot alter.** What a task's ``test.sh`` installs at test time (curl, uv,
  pytest and its plugins: tasks/verifier_staging.py) was staged at build time. uv and the wheelhouse sit in
  a host directory the sandbox backend binds read-only at ``VERIFIER_TOOLS_DIR`` (mounted by root before
  the sandbox starts, resolved with no symlink allowed: root inside an image sandbox can neither write nor
  remount it, and a link it plants cannot redirect it). The fresh ``HOME`` gets what uv's installer would
  leave there: ``.local/bin/uv`` and ``uvx`` (links to the read-only binaries) and ``.local/bin/env``, so
  ``source $HOME/.local/bin/env`` works. uv runs offline, with no index, the wheelhouse as its only source,
  no Python downloads (the image's own ``python3.X``), its cache in the fresh ``HOME``, and no configuration
  file (``UV_NO_CONFIG``: a ``uv.toml`` the agent left in the workdir or ``/etc/uv`` is not read); pip reads
  no configuration file and no index; apt finds no sources (its ``update`` succeeds, its ``install`` finds
  the staged packages). ``staged_tools_env`` lists every variable; a forging wheel the agent offers uv
  through its own ``uv.toml`` is kept as a test (tests/tasks/test_images.py).
- **The report and the checks come from processes that never run the code under test.** The bundled
  runner (``junit_runner.py``) has a parent that reads the test files once, takes the checks they declare
  from their source (AST) and writes the report, and per test file a test process that imports it and
  sends one outcome per check over a pipe; a check without an outcome (the process died, hung, or
  reported less) fails. The test process imports the code under test only as a proxy: the module runs in
  an agent process (the working directory on its ``sys.path`` after the stdlib and site-packages: a
  ``/app/csv.py`` cannot shadow ``csv``), every call crosses a pipe, and arguments and results are plain
  data rebuilt as real stdlib types (an object of the code under test stays there as a reference equal
  only to itself; its exceptions come back as builtin types or local stand-ins). So it cannot return an
  object equal to everything, replace the checks' code or write their outcomes; a call that hangs, dies
  or answers garbage fails its check even if the check catches every ``Exception``. The parent is not
  dumpable (no ptrace or ``/proc/PID/mem`` from the same user), ignores catchable signals, kills every
  process but its ancestors before writing (bwrap sandboxes only, as ``KILL_STRAYS``), fails every check
  and stops the shell when a test script changed during the run (bash reads on into appended lines),
  removes whatever the tests left at the report's path and writes the report atomically. Where the kernel
  has Landlock (ABI 6+, Linux 6.12) the test process and all it starts run in a Landlock domain, the agent
  process in one nested in it: they cannot write ``/tests``, ptrace or open ``/proc/PID/{fd,mem}`` of, or
  signal a process outside their domain (the agent process: the test process; both: the runner and the
  shells above it), and a supervisor kills all of them at once (``kill(-1)``
  scoped to the domain) before the report is written. The graders then compare the report with the
  checks the task declares, read from the task's test files on the host (``reports.declared_checks``): a
  missing, renamed, skipped or deselected check is a failure, and a reward file can only lower the
  result (``graders``).
- **Nothing outlives the run.** Right after the test command every other process of the fork is killed
  (``KILL_STRAYS``: ``kill -KILL -1`` from the fork's shell, bwrap sandboxes only) and again before the
  reports are read; a report that is not a regular file (a symlink to something the agent wrote) makes
  every report of the run refused.

What is *not* guaranteed:

- Code that the task's tests themselves run (the module under test they call, a script they execute)
  runs with the verifier's rights, by the task's design: it decides what its functions return and what
  its own objects say when a check asks (``str``, ``len``, attributes), and it can change files a check
  reads after calling it. Through the bundled runner it never runs in the checks' process (above); under
  pytest (``python3 -m pytest``, the TB2 shape) it does, and can make the checks pass without solving
  anything (an object equal to everything; kept as cases against the bundled runner in
  ``tests/grading/test_redteam.py``). A check that passes a function or mutates an argument in place
  cannot work through the runner's proxy (the test file must use plain data, junit_runner.py).
- Without Landlock (Linux < 6.12 lacks signal scoping, < 5.19 all of it) the test process can still
  write ``/tests``, signal the runner (``SIGKILL`` it after planting a report) and reach the shells above
  it through ``/proc`` (``/proc/PID/fd``, ptrace); outside a bwrap sandbox, processes the tests started
  outlive the runner there. The runner says so on stderr (the verifier log).
- A task whose declared ``PATH`` adds a directory the agent can write (an image's virtualenv in the
  workdir, ``/workspace/.venv/bin``) runs the programs found only there (``python`` where the system has
  only ``python3``) from it, after the system directories.
- ``python3 -m pytest`` puts its working directory first on ``sys.path`` (pytest's own semantics; the
  tests of such a task import the workdir's modules that way), so there the workdir can shadow the stdlib,
  and pytest writes the report from the process that imports the code under test (none of the runner's
  process split). The bundled tasks use ``junit_runner.py``.
- A sandbox whose system directories (``/usr``) are writable by the agent (a task run in its image as
  root, ``sandbox.task_images``: the overlay lets root write them, as a container does) can replace the
  interpreter itself in the state the verifier forks; host-userland bwrap sandboxes mount them read-only.
- A task's own ``test.sh`` may undo all of this (source the agent's files, put the workdir first on
  ``PYTHONPATH``); bundled tasks do not.
- The staged apt packages (``curl``, ``python3.13``) are part of the image, so the agent sees them too, and
  in an image sandbox run as root it can replace them like any system file (the case above). The
  staged uv, uvx and wheels are the only staged tools it cannot touch. pytest looks for its configuration
  from the tests' directory upwards, so an agent's ``/pytest.ini`` (with a ``/conftest.py`` or a plugin in
  ``addopts``) would program a ``pytest /tests/...`` run: the verifier writes an empty ``/tests/pytest.ini``
  when the task ships no pytest configuration there (``PYTEST_CONFIGS``), which ends the search. A task that
  ships only a ``tox.ini`` / ``setup.cfg`` / ``pyproject.toml`` without a pytest section in ``tests/`` is
  searched past it, as pytest does; a test command whose paths are not all under ``/tests`` (``pytest`` run
  in the workdir) reads the workdir's configuration by the task's design. In the ``uv run`` shape uv
  discovers a ``pyproject.toml`` the agent left in the workdir or above it and installs that project's
  dependencies (uv 0.9 has no variable to turn project discovery off); ``uvx`` (``uv tool run``), the usual
  TB2 shape, reads no project.

The run has its own timeout: a hung verifier yields ``timed_out`` and never stalls training.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from fireflash.protocols import VERIFIER_TOOLS_DIR, ExecResult, Sandbox, Task

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
REPORT_FILES = ("reward.json", "reward.txt", "junit.xml")
MARKER = ".fireflash-fresh"
# pytest's configuration files, by its own precedence; the verifier adds an empty one to /tests when the task
# ships none, so pytest's upward search for a rootdir and configuration stops at /tests
PYTEST_CONFIGS = {"pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"}
PYTEST_INI = b"# written by the verifier: pytest's configuration search stops here, not at an agent's /pytest.ini\n[pytest]\n"
# The stdlib runner bundled and generated tasks grade with, written into /tests by the verifier (list_test_files)
RUNNER = Path(__file__).with_name("junit_runner.py")
MAX_REPORT_BYTES = 8 * 1024 * 1024
# pytest honours these even when a task's script does not pass them: JUnit for partial credit, no
# colour codes in logs, no cache directory written into the graded tree.
PYTEST_ADDOPTS = f"-p no:cacheprovider --color=no --junitxml={VERIFIER_DIR}/junit.xml"
# The only PATH the test command gets: system directories, none the agent can write in a bwrap sandbox.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Kill every process the shell can signal but itself and pid 1, only where pid 1 is the bwrap sandbox's
# keeper (its command line names FF_CTL_FD; sandbox/shell.py): in its own pid namespace that is every
# process of the fork. Anywhere else (the unsafe-local backend runs on the host) `kill -1` would hit every
# process of the user, so nothing is killed there.
KILL_STRAYS = "if /bin/grep -qa FF_CTL_FD /proc/1/cmdline 2>/dev/null; then kill -KILL -1 2>/dev/null; fi"
# Seconds added to the verifier timeout before the grader gives up on the sandbox itself.
SANDBOX_GRACE_SEC = 15.0


@dataclass
class VerifierOutput:
    """What one verifier run left behind (raw; scoring lives in ``graders``)."""

    reports: dict[str, bytes]  # report file name (REPORT_FILES) → its bytes, for those that exist
    exit_code: int | None
    timed_out: bool
    log: str  # preview of the test command's stdout+stderr
    duration_sec: float
    error: str = ""  # a report over MAX_REPORT_BYTES, or the sandbox failing


def list_test_files(tests_dir: Path) -> list[tuple[str, bytes, int]]:
    """(relative path, content, mode) of every file the verifier writes under ``/tests``: those under
    ``tests_dir``, sorted for determinism, with FireFlash's runner as ``junit_runner.py`` when a file names it.

    The runner is the grader's, not the task's: tasks ship none (their ``test.sh`` runs
    ``/tests/junit_runner.py``), and a copy a task does ship is replaced, so an old or altered runner in a
    task directory never decides a score (``RUNNER``).

    Raises:
        FileNotFoundError: ``tests_dir`` is not a directory.
    """
    if not tests_dir.is_dir():
        raise FileNotFoundError(f"{tests_dir}: tests directory missing (GraderSpec.tests_dir)")
    files = []
    for path in sorted(p for p in tests_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = path.relative_to(tests_dir).as_posix()
        if rel != RUNNER.name:
            files.append((rel, path.read_bytes(), path.stat().st_mode & 0o777))
    if any(RUNNER.name.encode() in data for _, data, _ in files):
        files.append((RUNNER.name, RUNNER.read_bytes(), 0o644))
    return files


async def run_verifier(task: Task, sandbox: Sandbox, timeout_sec: float | None = None) -> VerifierOutput:
    """Fork ``sandbox``, copy the tests in, run ``task.grader.test_command``, read the reports.

    Args:
        task: gives the tests directory, test command, working directory and verifier timeout.
        sandbox: the attempt's final state; only a fork of it is touched.
        timeout_sec: overrides ``task.limits.verifier_timeout_sec`` (seconds).

    Returns:
        The raw outcome; never raises for anything the tests or the agent's files do. Sandbox failures
        are returned in ``error``.
    """
    timeout = timeout_sec or task.limits.verifier_timeout_sec
    start = time.monotonic()
    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives
        # as the result lands, leaving a cancelled worker running forever
        async with asyncio.timeout(timeout + SANDBOX_GRACE_SEC):
            return await _run(task, sandbox, timeout, start)
    except TimeoutError:
        return VerifierOutput({}, None, True, "", time.monotonic() - start, "sandbox did not return in time")


async def grading_fork(task: Task, sandbox: Sandbox) -> Sandbox:
    """The fork of ``sandbox`` the verifier runs in: the task's verifier user (image-backed tasks), and no
    network even when the attempt had it (a task with ``allow_internet`` under ``sandbox.allow_internet``)."""
    kwargs: dict = {}
    if task.environment.verifier_user is not None:  # tasks run in their image ([verifier].user, else the image's)
        kwargs["user"] = task.environment.verifier_user
    if task.environment.allow_internet:  # only such a task's attempt may have had the network
        kwargs["offline"] = True
    return await sandbox.fork(**kwargs)


async def _run(task: Task, sandbox: Sandbox, timeout: float, start: float) -> VerifierOutput:
    fork = await grading_fork(task, sandbox)
    try:
        # The fork's user may not delete /tests or /logs themselves (root-owned parents); emptying them
        # is enough. The listing proves nothing the agent left behind survives.
        await _exec(
            fork,
            f"find {TESTS_DIR} {VERIFIER_DIR} -mindepth 1 -delete 2>/dev/null; rm -rf {TESTS_DIR} {VERIFIER_DIR} 2>/dev/null; true",
            timeout_sec=30,
        )
        try:
            await fork.write_file(f"{VERIFIER_DIR}/{MARKER}", b"")
            if task.grader.tests_dir is not None:
                files = list_test_files(task.grader.tests_dir)
                for rel, data, mode in files:
                    await fork.write_file(f"{TESTS_DIR}/{rel}", data, mode=mode)
                if not PYTEST_CONFIGS & {rel for rel, _, _ in files}:
                    # pytest looks for its configuration from /tests upwards: an agent's /pytest.ini (its
                    # addopts, pythonpath, plugins, and with it a /conftest.py) would program the run
                    await fork.write_file(f"{TESTS_DIR}/pytest.ini", PYTEST_INI)
        except OSError as e:
            return VerifierOutput(
                {},
                None,
                False,
                "",
                time.monotonic() - start,
                f"cannot write {e.filename or TESTS_DIR} in the grading fork ({e.strerror}); the "
                f"sandbox backend must let its user create {TESTS_DIR} and {VERIFIER_DIR}",
            )
        prep = await _exec(fork, f"ls -A {VERIFIER_DIR}", timeout_sec=30)
        if prep.exit_code != 0 or prep.preview.split() != [MARKER]:
            return VerifierOutput(
                {},
                prep.exit_code,
                False,
                prep.preview,
                time.monotonic() - start,
                f"{VERIFIER_DIR} is not empty after the reset: {prep.preview[:200]!r}",
            )
        result = await _exec(fork, verifier_command(task), timeout_sec=timeout)
        # a process the tests started (the code under test may fork a rewriter) must not outlive them:
        # kill everything but this shell and pid 1 before the reports are read
        await _exec(fork, f"{KILL_STRAYS}; true", timeout_sec=30)
        reports, error = await _read_reports(fork)
        return VerifierOutput(
            reports, result.exit_code, result.timed_out, result.preview, time.monotonic() - start, error
        )
    finally:
        await fork.close()


async def _exec(fork: Sandbox, command: str, timeout_sec: float) -> ExecResult:
    """``fork.exec`` with ``PATH`` reset to ``SYSTEM_PATH`` first: the fork's shell starts with the task's
    ``PATH``, which may name an agent-writable directory (a venv in the workdir) holding a fake ``ls``,
    ``find`` or ``rm`` that would hide a planted report."""
    return await fork.exec(f"PATH={SYSTEM_PATH}; export PATH; {command}", timeout_sec=timeout_sec)


def verifier_env(task: Task) -> dict[str, str]:
    """Every environment variable the test command gets (nothing from the agent's shell or files).

    The task's declared ``environment.env`` first, then the verifier's own variables, which win. ``PATH``
    is ``SYSTEM_PATH`` followed by the directories the task's own ``PATH`` adds (an image's virtualenv):
    a program named like a system one always resolves to the system one.
    """
    system = SYSTEM_PATH.split(":")
    extra = [d for d in task.environment.env.get("PATH", "").split(":") if d and d not in system]
    return dict(task.environment.env) | staged_tools_env(task) | {
        "PATH": ":".join(system + list(dict.fromkeys(extra))),
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
        "PY_COLORS": "0",
        "TERM": "dumb",
        "TEST_DIR": TESTS_DIR,
        "PYTEST_ADDOPTS": PYTEST_ADDOPTS,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }


def staged_tools_env(task: Task) -> dict[str, str]:
    """Variables that point uv, pip and apt at the staged tools offline ({} for a task without them).

    uv: offline, no index, the wheelhouse as its only source, no Python downloads (the image's own Python
    is used), and no configuration file read (``UV_NO_CONFIG``: a ``uv.toml`` the agent left in the workdir or
    ``/etc/uv`` cannot add a source); its cache is in the fresh ``HOME`` (``verifier_command``). pip: no
    index, the wheelhouse, no configuration file (``PIP_CONFIG_FILE=/dev/null`` reads none). apt: no
    sources, so ``apt-get update`` succeeds offline and ``apt-get install`` finds the staged packages.
    """
    if task.environment.verifier_tools is None:
        return {}
    tools = VERIFIER_TOOLS_DIR
    return {
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": f"{tools}/wheels",
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_CONFIG": "1",
        "UV_NO_PROGRESS": "1",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"{tools}/wheels",
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "APT_CONFIG": f"{tools}/apt.conf",
    }


def _staged_home(task: Task) -> str:
    """Shell that gives the fresh ``HOME`` what uv's installer would have left in it: ``.local/bin/uv``,
    ``uvx`` (links to the read-only staged binaries) and ``.local/bin/env``; '' without staged tools."""
    if task.environment.verifier_tools is None:
        return ""
    tools = VERIFIER_TOOLS_DIR
    return (
        '/bin/mkdir -p "$ff_home/.local/bin" "$ff_home/.cache"; '
        f'for ff_tool in uv uvx; do [ -x {tools}/bin/$ff_tool ] && /bin/ln -s {tools}/bin/$ff_tool '
        '"$ff_home/.local/bin/$ff_tool"; done; '
        f'/bin/cp {tools}/env "$ff_home/.local/bin/env"; '
    )


def verifier_command(task: Task) -> str:
    """The shell line run in the grading fork: a fresh ``HOME``, ``env -i`` with ``verifier_env``, the
    workdir as cwd, and ``task.grader.test_command`` under a bash that reads no start-up file; then every
    other process of the fork is killed at once (a rewriter the tests started gets no time after the
    report is written). The line's exit status is the test command's (97: no fresh ``HOME``)."""
    exports = " ".join(shlex.quote(f"{k}={v}") for k, v in verifier_env(task).items())
    workdir = shlex.quote(task.environment.workdir)
    test = shlex.quote(task.grader.test_command)
    cache = 'UV_CACHE_DIR="$ff_home/.cache/uv" ' if task.environment.verifier_tools is not None else ""
    return (
        # /tmp is a fresh tmpfs in every fork: the agent never saw this directory. No `exit`: this runs in
        # the fork's persistent shell.
        "if ff_home=$(/usr/bin/mktemp -d /tmp/fireflash-verifier-home.XXXXXX); then "
        f"{_staged_home(task)}cd {workdir} 2>/dev/null; "
        f'/usr/bin/env -i HOME="$ff_home" {cache}{exports} /bin/bash --noprofile --norc -c {test}; ff_rc=$?; '
        f"else ff_rc=97; fi; {KILL_STRAYS}; (exit $ff_rc)"
    )


async def _read_reports(fork: Sandbox) -> tuple[dict[str, bytes], str]:
    names = " ".join(REPORT_FILES)
    listing = await _exec(
        fork,
        f'cd {VERIFIER_DIR} && for f in {names}; do if [ -L "$f" ]; then echo "$f link"; '
        f'elif [ -e "$f" ]; then echo "$f $(stat -c %s "$f")"; fi; done; true',
        timeout_sec=30,
    )
    reports: dict[str, bytes] = {}
    errors = []
    for line in listing.preview.splitlines():
        name, _, size = line.partition(" ")
        if name not in REPORT_FILES:
            continue
        if not size.isdigit():
            # a symlink or a directory: the runner writes plain files; anything else was planted
            # planted during the run by code the tests executed: no report of this run is trusted
            return {}, f"{name} in {VERIFIER_DIR} is not a regular file; every report refused"
        if int(size) > MAX_REPORT_BYTES:
            errors.append(f"{name} is {size} bytes (> {MAX_REPORT_BYTES})")
            continue
        reports[name] = await fork.read_file(f"{VERIFIER_DIR}/{name}")
    return reports, "; ".join(errors)
