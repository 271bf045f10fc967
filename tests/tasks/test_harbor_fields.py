"""Harbor task.toml fields that change behaviour are honoured or refused by name (issue 26 Deliver 5).

Honoured: ``[environment.env]`` (every command of the agent and the verifier sees it, over the Dockerfile's
or the image's ENV), ``docker_image`` (the task's image; refused by a loader without a sandbox config when
the task has no Dockerfile), ``memory``/``storage`` sizes, ``cpus`` and ``[agent]``/``[verifier] user``
(test_loader.py, test_images.py; storage_mb's disk quota: tests/sandbox/test_disk_quota.py). Refused, naming
the field or file: multi-step ``[[steps]]`` / ``steps/``, docker-compose environments, MCP server sidecars
and ``gpus``.
"""

import asyncio
import shutil
from pathlib import Path

import pytest

from fireflash.grading.verifier import verifier_env
from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.loader import TaskLoadError, load_task

VALID = Path(__file__).parent / "fixtures" / "gates" / "valid-sort"


def task(tmp_path: Path, environment: str = "", top: str = "", name: str = "t", tables: str = "") -> Path:
    """valid-sort with ``environment`` keys in [environment], ``top`` before it all, ``tables`` at the end."""
    root = shutil.copytree(VALID, tmp_path / name)
    toml = (root / "task.toml").read_text().replace("[environment]\n", f"[environment]\n{environment}\n")
    (root / "task.toml").write_text(top + toml + tables)
    return root


@pytest.mark.unit
def test_environment_env_is_honoured_over_the_dockerfile_env(tmp_path):
    root = task(tmp_path, tables="[environment.env]\nGREETING = \"hello there\"\nRETRIES = 3\nDEBUG = false\n")
    (root / "environment" / "Dockerfile").write_text(
        (root / "environment" / "Dockerfile").read_text() + 'ENV GREETING="from the Dockerfile" KEEP="yes"\n'
    )
    loaded = load_task(root)
    env = loaded.environment.env
    assert (env["GREETING"], env["RETRIES"], env["DEBUG"], env["KEEP"]) == ("hello there", "3", "false", "yes")
    assert verifier_env(loaded)["GREETING"] == "hello there"  # the verifier sees it too
    assert loaded.environment.storage_mb == 512  # the fields before the sub-table still count


@pytest.mark.unit
def test_bad_environment_env_names_the_field(tmp_path):
    with pytest.raises(TaskLoadError, match=r"\[environment\] env.BAD = \[1, 2\]: expected NAME = \"string\""):
        load_task(task(tmp_path, tables="[environment.env]\nBAD = [1, 2]\n"))
    with pytest.raises(TaskLoadError, match=r"\[environment\]: env = 'x' must be dict"):
        load_task(task(tmp_path, 'env = "x"', name="u"))


@pytest.mark.unit
def test_docker_image_is_kept_and_refused_where_the_host_has_nothing_of_it(tmp_path):
    root = task(tmp_path, 'docker_image = "team/env:1"')
    assert load_task(root).metadata["docker_image"] == "team/env:1"  # a Dockerfile to run on the host
    (root / "environment" / "Dockerfile").unlink()
    with pytest.raises(TaskLoadError, match=r"docker_image = 'team/env:1': the task's files come only from that "
                                            r"image.*load it with the sandbox config"):
        load_task(root)
    with pytest.raises(TaskLoadError, match=r"\[environment\]: docker_image = 1 must be str"):
        load_task(task(tmp_path, "docker_image = 1", name="u"))


@pytest.mark.unit
@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda r: task(r, top='[[steps]]\nname = "one"\n'), r"multi-step tasks \(\[\[steps\]\] in task.toml"),
        (lambda r: (task(r) / "steps" / "01").mkdir(parents=True), r"multi-step tasks .*a steps/ directory"),
        (lambda r: (task(r) / "environment" / "docker-compose.yaml").write_text("services: {}\n"),
         r"environment/docker-compose.yaml: docker-compose environments .* not supported yet"),
        (lambda r: (task(r) / "environment" / "compose.yml").write_text("services: {}\n"),
         r"environment/compose.yml: docker-compose environments"),
        (lambda r: task(r, tables='[[environment.mcp_servers]]\nname = "m"\ntransport = "stdio"\ncommand = "x"\n'),
         r"\[environment\] mcp_servers: MCP server sidecars are not supported yet"),
        (lambda r: task(r, "gpus = 1"), r"\[environment\] gpus = 1: GPUs in sandboxes are not supported yet"),
    ],
    ids=["steps-table", "steps-dir", "compose", "compose-yml", "mcp", "gpus"],
)
def test_unsupported_harbor_features_are_refused_by_name(tmp_path, edit, message):
    edit(tmp_path)
    with pytest.raises(TaskLoadError, match=message):
        load_task(tmp_path / "t")


@pytest.mark.unit
def test_gpus_zero_and_sizes_load(tmp_path):
    env = load_task(task(tmp_path, 'gpus = 0\nmemory = "512M"\nstorage = "10G"')).environment
    assert (env.memory_mb, env.storage_mb) == (1024, 512)  # the task's own *_mb keys win over the aliases
    root = tmp_path / "v"
    shutil.copytree(VALID, root)
    text = (root / "task.toml").read_text().replace("memory_mb = 1024\n", 'memory = "512M"\n')
    (root / "task.toml").write_text(text.replace("storage_mb = 512\n", 'storage = "10G"\n'))
    env = load_task(root).environment
    assert (env.memory_mb, env.storage_mb) == (512, 10240)


@pytest.mark.sandbox
def test_environment_env_reaches_the_agents_shell(tmp_path):
    loaded = load_task(task(tmp_path, tables='[environment.env]\nGREETING = "hello there"\n'))

    async def run():
        backend = make_backend(SandboxConfig())
        try:
            parent = await backend.prepare(loaded.environment, "env")
            child = await parent.fork()
            return (await child.exec('echo "$GREETING"')).preview
        finally:
            await backend.close()

    assert asyncio.run(run()) == "hello there\n"


@pytest.mark.unit
def test_environment_env_is_honoured_over_the_images_env(tmp_path):
    from test_images import FIXTURE, IMAGE_CONFIG, ScriptedTool

    from fireflash.sandbox.config import TRIXIE
    from fireflash.tasks.environments import place
    from fireflash.tasks.harbor import load_harbor

    root = shutil.copytree(FIXTURE, tmp_path / "img")
    (root / "task.toml").write_text((root / "task.toml").read_text() + '\n[environment.env]\nDEBIAN_FRONTEND = "teletype"\nMODE = "test"\n')
    tool = ScriptedTool(local={TRIXIE}, config=IMAGE_CONFIG)
    placed = place(load_harbor(root, images=True), SandboxConfig(), lambda line: None, lambda choice: tool)
    assert placed.environment.env == {"PATH": "/opt/venv/bin:/usr/bin:/bin", "DEBIAN_FRONTEND": "teletype", "MODE": "test"}


@pytest.mark.unit
def test_empty_harbor_tables_ask_for_nothing(tmp_path):
    # Terminal-Bench 2's task.toml files carry these, empty
    loaded = load_task(task(tmp_path, "gpus = 0\nmcp_servers = []", top="steps = []\n",
                            tables="[verifier.env]\n\n[environment.env]\n\n[solution.env]\n"))
    assert loaded.environment.storage_mb == 512
