"""A task's environment image (tasks/images.py): the decisions with a scripted tool, then real builds.

The scripted tool answers ``exists`` / ``pull`` / ``inspect`` from sets and "builds" with a shell command,
so every branch runs here without a container tool. The tests marked ``images`` build for real with the
host's podman (installed by ``make setup``): they build the Debian trixie base once when it is missing
(~1.5 min) and the fixture task's image (~1 min); later runs reuse both.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fireflash.sandbox.config import TRIXIE, SandboxConfig
from fireflash.sandbox.containers import ContainerToolMissing, ImageInfo, find_tool
from fireflash.sandbox.rootfs import image_rootfs
from fireflash.tasks.git_strip import STRIP_GIT
from fireflash.tasks.images import SUBSTITUTIONS_LABEL, ImageBuildError, base_map, content_digest, task_image

FIXTURE = Path(__file__).parent / "fixtures" / "images" / "ubuntu-apt-pip"
NO_HOST = "dial tcp: lookup registry-1.docker.io: no such host"


class ScriptedTool:
    """A container tool whose store is a set: pulls succeed only for ``pullable``; a build runs ``script``."""

    kind = "podman"

    def __init__(self, local=(), pullable=(), script="exit 0", config=((), "", "")):
        self.local, self.pullable, self.script = set(local), set(pullable), script
        self.config = config  # (ENV lines, WORKDIR, USER) of every image
        self.labels: dict[str, dict] = {}
        self.pulls: list[str] = []
        self.builds: list[str] = []  # the Dockerfile text of each build
        self.runs: list[tuple] = []
        self.probe = "fireflash-staging: python=3.13 missing=\n"

    def exists(self, ref):
        return ref in self.local

    def pull(self, ref, timeout_sec):
        self.pulls.append(ref)
        if ref in self.pullable:
            self.local.add(ref)
            return None
        return NO_HOST

    def inspect(self, ref):
        return ImageInfo("ab" * 32, self.labels.get(ref, {}), *self.config)

    def run(self, *args, timeout_sec=120.0):  # a container run: the staging probe (tasks/verifier_staging.py)
        self.runs.append(args)
        return self.probe

    def build_args(self, dockerfile, context, tag, build_args, volumes, labels):
        self.builds.append(dockerfile.read_text())
        if self.script == "exit 0":
            self.local.add(tag)
            self.labels[tag] = labels
        return ["sh", "-c", self.script]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FIREFLASH_CACHE", str(tmp_path / "cache"))


def _task(root: Path, dockerfile: str | None, environment: str = "") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "task.toml").write_text(f'version = "1.0"\n[environment]\n{environment}\n')
    if dockerfile is not None:
        (root / "environment" / "Dockerfile").write_text(dockerfile)
    return root


def test_unpullable_base_is_substituted_printed_recorded_and_cached():
    tool, said = ScriptedTool(local={TRIXIE}), []
    first = task_image(FIXTURE, SandboxConfig(), tool, said.append)
    assert first.source == "dockerfile" and not first.cached and first.image.startswith("localhost/fireflash/env:")
    assert [(s.original, s.replacement, s.line) for s in first.substitutions] == [
        ("ubuntu:24.04", TRIXIE, 4), ("ubuntu:24.04", TRIXIE, 7)]
    assert first.substitutions[0].reason == NO_HOST
    assert sum("cannot be pulled; using localhost/fireflash/debian:trixie" in line for line in said) == 2
    built = tool.builds[0].splitlines()
    assert f"FROM {TRIXIE} AS build" in built and f"FROM {TRIXIE}" in built
    assert "ARG SSL_CERT_FILE" in built  # the host's CA bundle reaches RUN steps (when the host has one)
    assert json.loads(tool.labels[first.image][SUBSTITUTIONS_LABEL])[0]["original"] == "ubuntu:24.04"

    again = task_image(FIXTURE, SandboxConfig(), tool, said.append)
    assert again.cached and again.image == first.image and len(tool.builds) == 1
    assert again.substitutions == first.substitutions  # read back from the image's label
    assert tool.pulls == ["docker.io/library/ubuntu:24.04"] * 2  # only the first build tried the registry


def test_an_image_neither_pullable_nor_mapped_stops_before_the_build(tmp_path):
    task = _task(tmp_path / "t", "FROM busybox:1\nCOPY --from=ghcr.io/astral-sh/uv:0.5 /uv /bin/\n")
    tool = ScriptedTool(local={"busybox:1"})
    with pytest.raises(ImageBuildError, match=r"COPY --from ghcr.io/astral-sh/uv:0.5 \(Dockerfile line 2\).*"
                                              r"no such host.*\nfix: .*sandbox.base_images"):
        task_image(task, SandboxConfig(), tool, print)
    assert tool.builds == []


def test_a_pullable_base_is_pulled_by_its_registry_name_not_substituted(tmp_path):
    task = _task(tmp_path / "t", "FROM ubuntu:24.04 AS base\n")
    tool = ScriptedTool(local={TRIXIE}, pullable={"docker.io/library/ubuntu:24.04"})
    record = task_image(task, SandboxConfig(), tool, print)
    assert record.substitutions == [] and not record.cached
    assert "FROM docker.io/library/ubuntu:24.04 AS base" in tool.builds[0].splitlines()


def test_docker_image_when_local_and_the_dockerfile_when_not(tmp_path):
    task = _task(tmp_path / "t", "FROM busybox:1\n", 'docker_image = "team/env:1"')
    record = task_image(task, SandboxConfig(), ScriptedTool(local={"team/env:1"}), print)
    assert (record.source, record.image, record.cached) == ("docker_image", "team/env:1", True)
    record = task_image(task, SandboxConfig(), ScriptedTool(local={"busybox:1"}), print)
    assert record.source == "dockerfile" and "docker_image team/env:1 is not local" in record.notes[0]


def test_terminal_bench_1_layout_builds_its_top_level_dockerfile(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "task.yaml").write_text("instruction: x\n")
    (tmp_path / "t" / "Dockerfile").write_text("FROM busybox:1\nCOPY run-tests.sh /\n")
    tool = ScriptedTool(local={"busybox:1"})
    record = task_image(tmp_path / "t", SandboxConfig(), tool, print)
    assert record.source == "dockerfile" and tool.builds[0].startswith("FROM busybox:1\n")


def test_neither_dockerfile_nor_image(tmp_path):
    task = _task(tmp_path / "t", None, 'docker_image = "team/env:1"')
    with pytest.raises(ImageBuildError, match="task t: no .*environment/Dockerfile and no usable"):
        task_image(task, SandboxConfig(), ScriptedTool(), print)


def test_a_failed_build_names_the_task_the_log_tail_and_the_fix(tmp_path):
    task = _task(tmp_path / "t", "FROM ubuntu:24.04\nRUN apt-get install -y libfoo\n")
    tool = ScriptedTool(local={TRIXIE}, script="echo 'E: Unable to locate package libfoo'; exit 100")
    with pytest.raises(ImageBuildError) as caught:
        task_image(task, SandboxConfig(), tool, print)
    message = str(caught.value)
    assert message.startswith("task t: building") and "exited 100" in message
    assert "E: Unable to locate package libfoo" in caught.value.log_tail and caught.value.log_path.is_file()
    assert "ubuntu:24.04 → localhost/fireflash/debian:trixie" in caught.value.fix


def test_an_apt_only_test_sh_is_staged_as_a_layer_on_the_task_image_and_cached(tmp_path):
    """No network here: only apt packages (no uv, no wheels) are asked for; the probe's answer is scripted."""
    task = _task(tmp_path / "t", "FROM busybox:1\n")
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("apt-get update\napt-get install -y jq libfoo\ngit clone https://x/y\n")
    tool, said = ScriptedTool(local={"busybox:1"}, config=((), "/app", "agent")), []
    tool.probe = "fireflash-staging: python= missing= libfoo\n"
    first = task_image(task, SandboxConfig(), tool, said.append)
    staged = first.verifier
    assert first.image == staged.image != staged.base_image and first.image.startswith("localhost/fireflash/env:v-")
    layer = tool.builds[-1].splitlines()
    assert layer[0] == f"FROM {staged.base_image}" and layer[-1] == "USER agent" and "USER root" in layer
    assert staged.missing == ["line 3: `git clone https://x/y`: git clone/fetch needs the network at test time",
                              "apt package libfoo: not in the image's apt archive (or the image has no apt-get)"]
    assert any("NOT staged:" in line and "libfoo" in line for line in said)
    assert Path(staged.tools_dir, "apt.conf").read_text().startswith('Dir::Etc::sourcelist "/dev/null";')
    again = task_image(task, SandboxConfig(), tool, said.append)
    assert again.verifier.cached and again.image == first.image and len(tool.builds) == 2  # task + layer, once


def test_content_digest_follows_files_modes_and_the_base_map(tmp_path):
    (tmp_path / "a.txt").write_text("a")
    base = content_digest("FROM x\n", tmp_path, {"x:latest": "y"})
    assert content_digest("FROM x\n", tmp_path, {"x:latest": "y"}) == base
    assert content_digest("FROM x\n", tmp_path, {"x:latest": "z"}) != base
    os.chmod(tmp_path / "a.txt", 0o755)
    assert content_digest("FROM x\n", tmp_path, {"x:latest": "y"}) != base
    (tmp_path / "a.txt").write_text("b")
    assert content_digest("FROM x\n", tmp_path, {"x:latest": "y"}) != base


def test_base_image_entries_extend_the_built_in_map():
    cfg = SandboxConfig(base_images={"team/base:1": "localhost/x:1", "ubuntu:24.04": ""})
    assert cfg.base_images["team/base:1"] == "localhost/x:1"
    assert cfg.base_images["ubuntu:22.04"] == "localhost/fireflash/debian:bookworm"
    assert cfg.base_images["ubuntu:24.04"] == ""  # dropped: that base is never substituted
    assert base_map(SandboxConfig(base_images={"docker.io/library/alpine": "a"}))["alpine:latest"] == "a"
    # Debian point releases (Terminal-Bench 2's build-pmars is FROM debian:13.0-slim) map to their release's base
    assert cfg.base_images["debian:13.0-slim"] == "localhost/fireflash/debian:trixie"
    assert cfg.base_images["debian:12.5"] == "localhost/fireflash/debian:bookworm"


# --- which tasks run in their image (tasks/environments.py, sandbox.task_images) ---------------------------

BUNDLED = Path(__file__).parents[2] / "src" / "fireflash" / "tasks" / "data" / "train" / "csv-filter-rows"
IMAGE_CONFIG = (("PATH=/opt/venv/bin:/usr/bin:/bin", "DEBIAN_FRONTEND=noninteractive"), "/app", "")


def _no_tool(choice):
    raise AssertionError("a task the host's userland runs must not look for a container tool")


def test_auto_keeps_host_runnable_tasks_on_the_host_and_never_looks_for_a_tool():
    from fireflash.tasks.environments import place
    from fireflash.tasks.loader import load_task

    task = load_task(BUNDLED, SandboxConfig(), print)  # materialises on the host: nothing else happens
    assert task.environment.image is None and task.environment.files_dir is not None
    assert place(load_task(BUNDLED), SandboxConfig(task_images="auto"), print, _no_tool) == load_task(BUNDLED)
    assert place(load_task(BUNDLED), SandboxConfig(task_images="never"), print, _no_tool) == load_task(BUNDLED)


def test_auto_runs_a_task_the_host_cannot_in_its_image_with_the_images_env_workdir_and_users():
    from fireflash.tasks.environments import place
    from fireflash.tasks.harbor import load_harbor
    from fireflash.tasks.task_environment import task_environment
    from fireflash.tasks.task_fields import TaskLoadError

    with pytest.raises(TaskLoadError, match="needs a container backend: .*multi-stage"):
        task_environment(FIXTURE / "environment" / "Dockerfile", FIXTURE / "environment", {}, "w")
    task = load_harbor(FIXTURE, images=True)
    assert task.environment.dockerfile is not None and "multi-stage" in task.metadata["host_userland"]
    tool = ScriptedTool(local={TRIXIE}, config=IMAGE_CONFIG)
    placed = place(task, SandboxConfig(), lambda line: None, lambda choice: tool)
    env = placed.environment
    assert env.image.startswith("localhost/fireflash/env:") and env.dockerfile is None and env.files_dir is None
    assert env.env == {"PATH": "/opt/venv/bin:/usr/bin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
    assert (env.workdir, env.user, env.verifier_user, env.setup_commands) == ("/app", None, "root", [STRIP_GIT])
    assert env.memory_mb == 1024  # task.toml's limits stay
    assert placed.metadata["image"]["substitutions"][0]["original"] == "ubuntu:24.04"
    assert "multi-stage" in placed.metadata["runs_in_image"]


def test_never_and_a_missing_tool_refuse_a_task_that_needs_its_image_by_name():
    from fireflash.sandbox.containers import ContainerToolMissing
    from fireflash.tasks.environments import place
    from fireflash.tasks.harbor import load_harbor
    from fireflash.tasks.task_fields import TaskLoadError

    task = load_harbor(FIXTURE, images=True)
    with pytest.raises(TaskLoadError, match=r"task ubuntu-apt-pip: the host's userland cannot run it: .*multi-stage.*"
                                            r"set sandbox.task_images = 'auto'"):
        place(task, SandboxConfig(task_images="never"), print, _no_tool)

    def missing(choice):
        raise ContainerToolMissing("no container tool found: podman, buildah or docker; run `make setup`")

    with pytest.raises(TaskLoadError, match=r"runs in its image \(.*multi-stage.*\), but no container tool found.*"
                                            r"make setup.*task_images = 'never'"):
        place(task, SandboxConfig(), print, missing)


def test_always_builds_every_task_with_a_dockerfile_and_users_choose_the_image(tmp_path):
    from fireflash.tasks.environments import place
    from fireflash.tasks.loader import load_task

    tool = ScriptedTool(local={"localhost/fireflash/python:3.11"}, config=((), "", "app"))
    placed = place(load_task(BUNDLED), SandboxConfig(task_images="always"), print, lambda choice: tool)
    assert placed.environment.image and placed.environment.workdir == "/"  # no WORKDIR in the image
    assert (placed.environment.user, placed.environment.verifier_user) == ("app", "app")  # the image's USER
    task_dir = shutil.copytree(BUNDLED, tmp_path / "t")
    (task_dir / "task.toml").write_text((task_dir / "task.toml").read_text().replace(
        "[agent]", '[agent]\nuser = "1000"'))
    placed = place(load_task(task_dir), SandboxConfig(), print, lambda choice: tool)  # auto: a user needs it
    assert (placed.environment.user, placed.environment.verifier_user) == ("1000", "app")
    assert "[agent] user = '1000'" in placed.metadata["runs_in_image"]


def test_a_long_build_while_loading_a_task_shows_progress_lines(monkeypatch, capsys):
    """`fireflash train > log` building a task's image while it loads: heartbeat lines with the build's latest
    output, not minutes of silence (issue #28); a short interval stands in for the 25 s one."""
    from functools import partial

    from fireflash import progress
    from fireflash.tasks import environments
    from fireflash.tasks.harbor import load_harbor

    class SlowTool(ScriptedTool):
        def build_args(self, dockerfile, context, tag, build_args, volumes, labels):
            super().build_args(dockerfile, context, tag, build_args, volumes, labels)
            return ["sh", "-c", "echo 'STEP 2/5: RUN apt-get install -y git'; sleep 0.5"]

    monkeypatch.setattr(environments, "Progress", partial(progress.Progress, every_sec=0.05, poll_sec=0.01))
    tool = SlowTool(local={TRIXIE}, config=IMAGE_CONFIG)
    environments.place(load_harbor(FIXTURE, images=True), SandboxConfig(), lambda line: None, lambda choice: tool)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("image for ubuntu-apt-pip: ")]
    assert any(line.endswith("STEP 2/5: RUN apt-get install -y git") for line in lines), lines


def test_a_pool_builds_images_only_for_the_tasks_its_manifest_kept(tmp_path, monkeypatch):
    from fireflash.tasks import environments
    from fireflash.tasks.loader import load_tasks

    def missing(choice):
        raise ContainerToolMissing("no container tool (test)")

    monkeypatch.setattr(environments, "find_tool", missing)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "ubuntu-apt-pip").symlink_to(FIXTURE)
    shutil.copytree(BUNDLED, tmp_path / "tasks" / "csv-filter-rows")
    tasks, errors = load_tasks([tmp_path / "tasks"], SandboxConfig(), print, only={"csv-filter-rows"})
    assert [t.id for t in tasks] == ["csv-filter-rows"] and errors == []
    tasks, errors = load_tasks([tmp_path / "tasks"], SandboxConfig(), print)  # the other needs a tool: said so
    assert [t.id for t in tasks] == ["csv-filter-rows"] and "no container tool (test)" in errors[0]


# --- real builds: the host's podman (make setup installs it) ---------------------------------------------

@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    try:
        tool = find_tool("auto")
    except ContainerToolMissing as e:
        pytest.skip(f"no container tool: {e}")
    if shutil.which("mmdebstrap") is None or os.geteuid() != 0:
        pytest.skip("needs mmdebstrap and root (make setup installs it; CI runs as root)")
    return tool


@pytest.fixture(scope="module")
def built(podman, tmp_path_factory):
    """The fixture task's image, built now (the builder's layer cache keeps a rebuild to seconds)."""
    said: list[str] = []
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FIREFLASH_CACHE", str(tmp_path_factory.mktemp("cache")))
        first = task_image(FIXTURE, SandboxConfig(), podman, said.append, rebuild=True)
        second = task_image(FIXTURE, SandboxConfig(), podman, said.append)
    return first, second, said


@pytest.mark.images
@pytest.mark.timeout(900)
def test_the_trixie_base_builds_or_exists(podman):
    from fireflash.tasks.bases import ensure_base

    ensure_base(podman, TRIXIE)
    assert podman.exists(TRIXIE)
    assert podman.inspect(TRIXIE).labels.get("fireflash.base") == TRIXIE
    if shutil.which("buildah"):  # the same store read through buildah's own inspect format
        assert find_tool("buildah").inspect(TRIXIE) == podman.inspect(TRIXIE)


@pytest.mark.images
@pytest.mark.timeout(900)
def test_fixture_task_builds_with_substitution_apt_pip_stages_and_copies(built):
    first, second, said = built
    assert not first.cached and first.builder in ("podman", "buildah")
    assert [s.line for s in first.substitutions] == [4, 7]
    assert all(s.replacement == TRIXIE for s in first.substitutions)
    assert any("FROM ubuntu:24.04 (line 4) cannot be pulled; using" in line for line in said)
    assert second.cached and second.image_id == first.image_id and second.substitutions == first.substitutions


@pytest.mark.images
@pytest.mark.timeout(600)
def test_rootfs_has_the_images_files_and_runs_its_python(podman, built, tmp_path):
    base = SandboxConfig().image_uid_base
    rootfs = image_rootfs(podman, built[0].image, tmp_path / "rootfs", base)
    assert image_rootfs(podman, built[0].image, tmp_path / "rootfs", base) == rootfs  # exported once
    assert rootfs.stat().st_uid == base and (rootfs / "usr/bin/tree").stat().st_uid == base  # root's: shifted
    assert (rootfs / "usr/bin/tree").is_file()  # the apt package (the host lacks it)
    assert (rootfs / "opt/stage-one.txt").read_text() == "made in the build stage\n"
    assert json.loads((rootfs / "etc/fixture/config.json").read_text()) == {"name": "fireflash"}
    assert (rootfs / "usr/local/share/fixture-marker").is_file() and (rootfs / "app/hello.txt").is_file()
    assert not (rootfs / "dev/fireflash-ca.crt").exists() and not list((rootfs / "dev").iterdir())
    code = "import sys, six; print(sys.version_info[:2], six.__version__)"
    done = subprocess.run(["bwrap", "--ro-bind", str(rootfs), "/", "--proc", "/proc", "--dev", "/dev", "--unshare-all",
                           "/opt/venv/bin/python", "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "(3, 13) 1.16.0", done.stderr
    env = podman.run("image", "inspect", "--format", "{{json .Config.Env}}", built[0].image)
    assert "SSL_CERT_FILE" not in env  # build ARGs never enter the image


def test_cli_refuses_an_unknown_suite_and_no_paths():
    from typer.testing import CliRunner

    from fireflash.cli import app

    result = CliRunner().invoke(app, ["images", "bases", "--suite", "sid"])
    assert result.exit_code == 2 and "--suite sid: choose from bookworm, trixie" in result.output
    result = CliRunner().invoke(app, ["tasks", "build", "sandbox.image_builder=podman"])
    assert result.exit_code == 2 and "no task paths given" in result.output


@pytest.mark.images
@pytest.mark.timeout(600)
def test_cli_keeps_an_existing_base_and_reports_a_cached_task_image(built, tmp_path):
    from typer.testing import CliRunner

    from fireflash.cli import app

    result = CliRunner().invoke(app, ["images", "bases", "--suite", "trixie"])
    assert result.exit_code == 0 and f"{TRIXIE}: exists, kept" in result.output
    result = CliRunner().invoke(app, ["tasks", "build", str(FIXTURE), "--report-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"ubuntu-apt-pip: {built[0].image} (cached)" in result.output
    assert "FROM ubuntu:24.04 (line 4) was substituted by localhost/fireflash/debian:trixie" in result.output
    record = json.loads((tmp_path / "ubuntu-apt-pip.json").read_text())
    assert record["schema_version"] == 1 and record["substitutions"][0]["line"] == 4


@pytest.mark.images
@pytest.mark.sandbox
@pytest.mark.timeout(900)
def test_a_task_the_host_cannot_run_is_solved_and_graded_in_its_image(built, tmp_path):
    """End to end: loaded with sandbox.task_images='auto', forked from its image, solved, verified as root."""
    import asyncio

    from fireflash.grading.verifier import run_verifier
    from fireflash.sandbox import make_backend
    from fireflash.tasks.loader import load_task

    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("the bwrap backend needs root and bubblewrap")
    cfg = SandboxConfig(root_dir=f"/dev/shm/fireflash-test-{os.getpid()}-e2e", image_rootfs_dir=str(tmp_path / "rootfs"))
    task = load_task(FIXTURE, cfg, print)
    assert task.environment.image == built[0].image and task.environment.workdir == "/app"

    async def attempt(solve: bool) -> bytes:
        backend = make_backend(cfg)
        try:
            parent = await backend.prepare(task.environment, task.id)
            sandbox = await parent.fork()
            if solve:
                await sandbox.write_file("/solution/solve.sh", (FIXTURE / "solution" / "solve.sh").read_bytes(), 0o755)
                assert (await sandbox.exec("bash /solution/solve.sh && cat /app/answer.txt")).preview == "fireflash\n"
            output = await run_verifier(task, sandbox)
            assert output.error == "" and output.exit_code == 0, output
            return output.reports["reward.txt"]
        finally:
            await backend.close()

    assert asyncio.run(attempt(solve=True)).strip() == b"1"
    assert asyncio.run(attempt(solve=False)).strip() == b"0"
    assert not os.path.exists(cfg.root_dir) or not os.listdir(cfg.root_dir)
    shutil.rmtree(cfg.root_dir, ignore_errors=True)


# --- a Terminal-Bench-2-shaped task whose official test.sh installs curl, uv and pytest (issue 26) ----------

TB2 = Path(__file__).parent / "fixtures" / "images" / "tb2-uvx-pytest"
TB2_CHECKS = ("test_report_exists", "test_header", "test_counts", "test_order")


def _forging_wheel(path: Path) -> None:
    """A 'pluggy 1.99' (pytest needs pluggy>=1.5,<2: the highest version wins) that, when pytest imports it,
    writes a JUnit report passing every check of the TB2 fixture and exits 0: the agent's forgery."""
    import zipfile

    cases = "".join(f'<testcase classname="test_outputs" name="{name}"/>' for name in TB2_CHECKS)
    code = f"import os\nopen('/logs/verifier/junit.xml', 'w').write('<testsuite>{cases}</testsuite>')\nos._exit(0)\n"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("pluggy/__init__.py", code)
        wheel.writestr("pluggy-1.99.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pluggy\nVersion: 1.99.0\n")
        wheel.writestr("pluggy-1.99.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
                                                         "Tag: py3-none-any\n")
        wheel.writestr("pluggy-1.99.0.dist-info/RECORD", "pluggy/__init__.py,,\npluggy-1.99.0.dist-info/RECORD,,\n")


@pytest.fixture(scope="module")
def tb2(podman, tmp_path_factory):
    """The TB2 fixture loaded as training loads it: image built (its trixie base shared with the tests above),
    test.sh's tools staged; (task, sandbox config, printed lines, seconds to load)."""
    import time

    from fireflash.tasks.loader import load_task

    if shutil.which("bwrap") is None:
        pytest.skip("the bwrap backend needs bubblewrap")
    said: list[str] = []
    cfg = SandboxConfig(root_dir=f"/dev/shm/fireflash-test-{os.getpid()}-tb2",
                        image_rootfs_dir=str(tmp_path_factory.mktemp("rootfs")))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FIREFLASH_CACHE", str(tmp_path_factory.mktemp("tb2-cache")))
        start = time.monotonic()
        task = load_task(TB2, cfg, said.append)
        yield task, cfg, said, time.monotonic() - start
    shutil.rmtree(cfg.root_dir, ignore_errors=True)


@pytest.mark.images
@pytest.mark.sandbox
@pytest.mark.timeout(1800)
def test_a_tb2_task_with_its_official_test_sh_passes_every_gate_offline(tb2):
    import asyncio

    from fireflash.protocols import VERIFIER_TOOLS_DIR
    from fireflash.sandbox import make_backend
    from fireflash.tasks.config import GatesConfig
    from fireflash.curation.gates import validate_task

    task, cfg, said, _ = tb2
    staging = task.metadata["image"]["verifier"]
    assert task.environment.allow_internet and task.environment.verifier_tools is not None
    assert task.environment.image == staging["image"] != staging["base_image"]  # the apt layer on the task image
    assert (staging["needs"]["apt"], staging["uv_version"], staging["python"], staging["missing"]) == (
        ["curl"], "0.9.5", "3.13", [])
    assert {w.split("-")[0] for w in staging["wheels"]} >= {"pytest", "pytest_json_ctrf", "pluggy", "iniconfig"}
    assert any("verifier staged" in line and "uv 0.9.5" in line for line in said)
    tools = task.environment.verifier_tools
    assert (tools / "bin" / "uv").stat().st_mode & 0o777 == 0o755 and (tools / "env").is_file()

    async def gates():
        backend = make_backend(cfg)
        try:
            return await validate_task(task, backend, GatesConfig(cold_starts=1, fuzz_cases=2, determinism_repeats=2))
        finally:
            await backend.close()

    report = asyncio.run(gates())
    assert report.passed and report.failed_gates == [], report.model_dump_json(indent=1)
    offline = report.gates[2].detail
    assert "allow_internet = true: recorded" in offline and "verifier phase: offline" in offline
    assert "Could not resolve host: astral.sh" in offline and "uv 0.9.5" in offline
    assert report.gates[0].detail.startswith("reward=1.000 checks=4/4")
    assert "do-nothing reward=0.000" in report.gates[5].detail
    assert VERIFIER_TOOLS_DIR == "/.fireflash-verifier"


@pytest.mark.images
@pytest.mark.sandbox
@pytest.mark.timeout(900)
def test_an_agents_uv_config_cannot_add_a_forging_wheel_to_the_verifier(tb2, tmp_path, monkeypatch):
    """Root in the agent's sandbox writes /etc/uv/uv.toml and /app/uv.toml pointing uv at its own wheels, with a
    'pluggy' that forges a passing report: the verifier (UV_NO_CONFIG) never reads them, so doing nothing scores 0.
    Without UV_NO_CONFIG the same attack forges a full score (checked too, so the attack stays real)."""
    import asyncio

    from fireflash.grading import verifier
    from fireflash.grading.graders import make_grader
    from fireflash.sandbox import make_backend

    task, cfg, _, _ = tb2
    _forging_wheel(tmp_path / "pluggy-1.99.0-py3-none-any.whl")
    wheel = (tmp_path / "pluggy-1.99.0-py3-none-any.whl").read_bytes()
    config = b'find-links = ["/app/wheels"]\n'

    async def attack() -> float:
        backend = make_backend(cfg)
        try:
            attempt = await (await backend.prepare(task.environment, "forge")).fork()
            await attempt.write_file("/app/wheels/pluggy-1.99.0-py3-none-any.whl", wheel)
            for path in ("/app/uv.toml", "/etc/uv/uv.toml"):
                await attempt.write_file(path, config)
            return (await make_grader(task.grader).grade(task, attempt)).reward
        finally:
            await backend.close()

    assert asyncio.run(attack()) == 0.0
    honest = verifier.staged_tools_env
    monkeypatch.setattr(verifier, "staged_tools_env", lambda t: {k: v for k, v in honest(t).items() if k != "UV_NO_CONFIG"})
    assert asyncio.run(attack()) == 1.0


@pytest.mark.images
@pytest.mark.sandbox
@pytest.mark.timeout(900)
def test_an_agents_pytest_ini_above_the_tests_cannot_program_the_verifiers_pytest(tb2, monkeypatch):
    """Root in the agent's sandbox writes /pytest.ini (pythonpath /app, a plugin of its own in addopts) and the
    plugin turns every failed check into a pass: pytest's upward configuration search from /tests would find
    it. The verifier's own /tests/pytest.ini ends the search, so doing nothing scores 0; without it the same
    attack forges a full score (checked too, so the attack stays real)."""
    import asyncio

    from fireflash.grading import verifier
    from fireflash.grading.graders import make_grader
    from fireflash.sandbox import make_backend

    task, cfg, _, _ = tb2
    plugin = (
        b"import pytest\n"
        b"@pytest.hookimpl(hookwrapper=True)\n"
        b"def pytest_runtest_makereport(item, call):\n"
        b"    outcome = yield\n"
        b"    report = outcome.get_result()\n"
        b"    report.outcome, report.longrepr = 'passed', None\n"
    )

    async def attack() -> float:
        backend = make_backend(cfg)
        try:
            attempt = await (await backend.prepare(task.environment, "forge-ini")).fork()
            await attempt.write_file("/app/ffforge.py", plugin)
            await attempt.write_file("/pytest.ini", b"[pytest]\npythonpath = /app\naddopts = -p ffforge\n")
            return (await make_grader(task.grader).grade(task, attempt)).reward
        finally:
            await backend.close()

    assert asyncio.run(attack()) == 0.0
    monkeypatch.setattr(verifier, "PYTEST_CONFIGS", {"test.sh"})  # as if the task shipped its own: none written
    assert asyncio.run(attack()) == 1.0
