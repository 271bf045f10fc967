"""Finding the container tool, its command lines, and long commands with a log (sandbox/containers.py)."""

import sys
import time

import pytest

from fireflash.sandbox.containers import ContainerTool, ContainerToolMissing, find_tool, run_logged


def _which(*present: str):
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_auto_prefers_podman_then_buildah_then_a_live_docker():
    assert find_tool("auto", _which("podman", "buildah", "docker")).kind == "podman"
    assert find_tool("auto", _which("buildah", "docker")).kind == "buildah"
    assert find_tool("auto", _which("docker"), docker_alive=lambda path: True).kind == "docker"


def test_docker_without_its_daemon_is_not_a_builder():
    with pytest.raises(ContainerToolMissing, match="daemon does not answer.*make setup"):
        find_tool("auto", _which("docker"), docker_alive=lambda path: False)
    with pytest.raises(ContainerToolMissing, match="image_builder = 'docker'.*start dockerd"):
        find_tool("docker", _which("docker", "podman"), docker_alive=lambda path: False)


def test_a_named_tool_must_be_installed():
    with pytest.raises(ContainerToolMissing, match="'buildah': buildah is not installed"):
        find_tool("buildah", _which("podman"))
    assert find_tool("docker", _which("podman", "docker"), docker_alive=lambda path: True).kind == "docker"


def test_podman_gets_runc_and_cgroupfs_on_every_call():
    tool = ContainerTool("podman", "/usr/bin/podman", "runc")
    assert tool.argv("images") == ["/usr/bin/podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "images"]
    assert ContainerTool("docker", "/usr/bin/docker").argv("images") == ["/usr/bin/docker", "images"]


def test_build_command_lines(tmp_path):
    dockerfile, context = tmp_path / "Dockerfile", tmp_path / "ctx"
    podman = ContainerTool("podman", "podman", "runc").build_args(
        dockerfile, context, "t:1", {"A": "1"}, [("/host/ca", "/dev/ca")], {"l": "v"})
    assert podman[-1] == str(context)
    assert "--pull=never" in podman  # every FROM image was made local first, or substituted
    assert podman[podman.index("--volume") + 1] == "/host/ca:/dev/ca:ro"
    assert podman[podman.index("--build-arg") + 1] == "A=1" and podman[podman.index("--label") + 1] == "l=v"
    docker = ContainerTool("docker", "docker").build_args(dockerfile, context, "t:1", {}, [("/host/ca", "/dev/ca")], {})
    assert "--volume" not in docker and "--pull=never" not in docker
    buildah = ContainerTool("buildah", "buildah", "runc").build_args(dockerfile, context, "t:1", {}, [], {})
    assert buildah[buildah.index("--runtime") + 1] == "runc" and "--layers" in buildah


def test_run_logged_streams_lines_to_the_log_and_callback(tmp_path):
    seen = []
    code = "import sys; print('one'); print('two', file=sys.stderr); sys.exit(3)"
    done = run_logged([sys.executable, "-c", code], tmp_path / "logs" / "x.log", seen.append)
    assert done.returncode == 3 and not done.timed_out
    assert sorted(seen) == ["one", "two"] and sorted(done.tail.splitlines()) == ["one", "two"]
    assert "one" in (tmp_path / "logs" / "x.log").read_text()


def test_run_logged_kills_the_process_group_on_timeout(tmp_path):
    start = time.monotonic()
    done = run_logged(["sh", "-c", "sleep 30 & sleep 30"], tmp_path / "x.log", timeout_sec=0.5)
    assert done.timed_out and done.returncode == -1
    assert time.monotonic() - start < 10  # the background sleep holding the pipe was killed too
