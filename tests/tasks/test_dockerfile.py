"""Materialising the supported Dockerfile subset without a container engine."""

import pytest

from fireflash.tasks.dockerfile import NeedsContainerBackend, materialise_dockerfile

pytestmark = pytest.mark.unit


def write(tmp_path, text, files=()):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"content of {name}\n")
    (tmp_path / "Dockerfile").write_text(text)
    return tmp_path / "Dockerfile"


def test_supported_subset(tmp_path):
    path = write(
        tmp_path,
        """
# comment
FROM python:3.12-slim AS base
ARG GREETING=hi
ENV A=1 B="two words"
ENV C 3
WORKDIR /opt
WORKDIR app
COPY data/ ./data/
COPY one.txt two.txt /opt/app/docs/
ADD three.txt renamed.txt
RUN echo $GREETING > hello.txt && \\
    mkdir -p out
RUN ["touch", "exec form"]
RUN apt-get update && apt-get install -y bash && rm -rf /var/lib/apt/lists/*
EXPOSE 80
CMD ["sleep", "infinity"]
""",
        files=["data/x.csv", "data/sub/y.csv", "one.txt", "two.txt", "three.txt"],
    )
    env = materialise_dockerfile(path)
    assert env.workdir == "/opt/app" and env.base_image == "python:3.12-slim"
    assert env.env == {"A": "1", "B": "two words", "C": "3"}
    staged = sorted(p.relative_to(env.files_dir).as_posix() for p in env.files_dir.rglob("*") if p.is_file())
    assert staged == ["data/sub/y.csv", "data/x.csv", "docs/one.txt", "docs/two.txt", "renamed.txt"]
    assert (
        "cd /opt/app && export GREETING=hi; echo $GREETING > hello.txt && mkdir -p out" in env.setup_commands
    )
    assert "cd /opt/app && export GREETING=hi; touch 'exec form'" in env.setup_commands
    assert not any("apt" in c for c in env.setup_commands)


def test_pip_install_goes_to_a_task_venv(tmp_path):
    env = materialise_dockerfile(
        write(tmp_path, "FROM python:3.11\nWORKDIR /w\nRUN pip install --no-cache-dir pytest\n")
    )
    assert env.env["PATH"].startswith("/w/.venv/bin:") and env.env["VIRTUAL_ENV"] == "/w/.venv"
    assert env.setup_commands[-1].endswith(
        "/w/.venv/bin/python -m pip install --no-index --disable-pip-version-check pytest"
    )


def test_pinned_pip_requirements_the_host_lacks_need_a_container_backend(tmp_path):
    """A Terminal-Bench Dockerfile's ``pip install click==8.1.7`` failed only when the sandbox started (the task
    venv installs offline from the host's packages); it is now a load-time reason to run the task in its image."""
    text = "FROM python:3.13-slim\nWORKDIR /w\nRUN pip install --no-cache-dir not-a-dist-ff==8.1.7 pytest==0.0.1\n"
    with pytest.raises(
        NeedsContainerBackend,
        match=r"Dockerfile:3: RUN: pip requirements not-a-dist-ff==8\.1\.7, pytest==0\.0\.1 are not installed on this host",
    ):
        materialise_dockerfile(write(tmp_path, text))
    # what only pip can decide (a range, a requirements file) is left to it, as before
    env = materialise_dockerfile(
        write(tmp_path, "FROM python:3.11\nRUN pip install -r reqs.txt 'pytest>=1'\n")
    )
    assert env.setup_commands[-1].endswith(
        "install --no-index --disable-pip-version-check -r reqs.txt pytest>=1"
    )


@pytest.mark.parametrize(
    "text,match",
    [
        ("FROM alpine\n", r"Dockerfile:1: FROM alpine: only Debian"),
        ("FROM debian\nFROM python\n", r"Dockerfile:2: FROM: multi-stage"),
        ("FROM debian\nUSER nobody\n", r"Dockerfile:2: USER: instruction USER needs a container backend"),
        ("FROM debian\nCOPY --from=build /a /b\n", r"Dockerfile:2: COPY: COPY --from"),
        ("FROM debian\nRUN curl -sSL https://x.sh | sh\n", r"Dockerfile:2: RUN: 'curl .* needs the network"),
        (
            "FROM debian\nRUN apt-get install -y definitely-not-a-package-ff\n",
            r"apt packages definitely-not-a-package-ff",
        ),
        (
            "FROM debian\nWORKDIR /app\nCOPY missing.txt .\n",
            r"Dockerfile:3: COPY missing\.txt: source not found",
        ),
        ("FROM debian\nADD https://example.com/a.tgz /app/\n", r"remote or archive"),
        ("WORKDIR /app\n", r"no FROM line"),
    ],
)
def test_unsupported_lines_are_named(tmp_path, text, match):
    with pytest.raises(NeedsContainerBackend, match=match):
        materialise_dockerfile(write(tmp_path, text))


def test_copy_outside_workdir_is_refused(tmp_path):
    path = write(tmp_path, "FROM debian\nWORKDIR /app\nCOPY one.txt /etc/one.txt\n", files=["one.txt"])
    with pytest.raises(
        NeedsContainerBackend, match=r"Dockerfile:3: COPY to /etc/one\.txt is outside WORKDIR /app"
    ):
        materialise_dockerfile(path)


def test_staging_is_cached_by_content(tmp_path):
    path = write(tmp_path, "FROM debian\nWORKDIR /app\nCOPY one.txt .\n", files=["one.txt"])
    first = materialise_dockerfile(path).files_dir
    assert materialise_dockerfile(path).files_dir == first
    (tmp_path / "one.txt").write_text("changed\n")
    assert materialise_dockerfile(path).files_dir != first
