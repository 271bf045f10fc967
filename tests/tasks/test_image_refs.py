"""The images a Dockerfile names, and the rewritten copy that is built (tasks/image_refs.py)."""

import pytest

from fireflash.tasks.image_refs import ImageUse, external_images, normalize, qualify, rewrite


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("ubuntu:24.04", "ubuntu:24.04"),
        ("docker.io/library/ubuntu:24.04", "ubuntu:24.04"),
        ("library/ubuntu", "ubuntu:latest"),
        ("ubuntu", "ubuntu:latest"),
        ("python:3.13-slim@sha256:abcd", "python:3.13-slim"),
        ("ghcr.io/astral-sh/uv:0.5", "ghcr.io/astral-sh/uv:0.5"),
        ("localhost:5000/team/img", "localhost:5000/team/img:latest"),
    ],
)
def test_normalize(ref, expected):
    assert normalize(ref) == expected


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("ubuntu:24.04", "docker.io/library/ubuntu:24.04"),
        ("team/env:1", "docker.io/team/env:1"),
        ("ghcr.io/astral-sh/uv:0.5", "ghcr.io/astral-sh/uv:0.5"),
        ("localhost/fireflash/debian:trixie", "localhost/fireflash/debian:trixie"),
        ("registry:5000/x", "registry:5000/x"),
    ],
)
def test_qualify_names_the_registry_docker_would_use(ref, expected):
    assert qualify(ref) == expected


MULTI = """\
# syntax=docker/dockerfile:1
ARG BASE=ubuntu:24.04
FROM --platform=linux/amd64 ${BASE} AS build
RUN apt-get update && \\
    # a comment inside a continuation
    apt-get install -y gcc
FROM build AS test
FROM scratch AS empty
FROM python:3.13-slim
COPY --from=build /out /usr/local/bin/
COPY --from=0 /x /y
COPY --chown=1:1 --from=ghcr.io/astral-sh/uv:0.5 /uv /bin/uv
COPY app/ /app/
"""


def test_external_images_skip_stages_scratch_and_numbers():
    assert external_images(MULTI) == [
        ImageUse("ubuntu:24.04", 3, "FROM"),
        ImageUse("python:3.13-slim", 9, "FROM"),
        ImageUse("ghcr.io/astral-sh/uv:0.5", 12, "COPY --from"),
    ]


def test_arg_default_and_unset_variable():
    text = "ARG V=3.11\nARG DISTRO\nFROM python:${V}-slim-${DISTRO:-bookworm}\n"
    assert external_images(text) == [ImageUse("python:3.11-slim-bookworm", 3, "FROM")]


def test_heredoc_body_is_not_read_as_instructions():
    text = "FROM debian:trixie\nRUN <<EOF\nFROM ubuntu:24.04\nEOF\nRUN cat <<< 'FROM x'\n"
    assert external_images(text) == [ImageUse("debian:trixie", 1, "FROM")]


def test_rewrite_replaces_the_image_keeps_the_stage_name_and_declares_args():
    out = rewrite(MULTI, {3: "localhost/fireflash/debian:trixie"}, ["SSL_CERT_FILE", "PIP_CERT"])
    lines = out.splitlines()
    assert lines[2] == "FROM --platform=linux/amd64 localhost/fireflash/debian:trixie AS build"
    assert lines[3:5] == ["ARG SSL_CERT_FILE", "ARG PIP_CERT"]
    assert out.count("ARG SSL_CERT_FILE") == 4  # after every FROM, stage references included
    assert "FROM python:3.13-slim" in lines  # unreplaced lines are kept as written
    assert "    # a comment inside a continuation" in lines
    assert lines[-1] == "COPY app/ /app/"


def test_rewrite_without_changes_is_the_same_text():
    assert rewrite(MULTI, {}) == MULTI


def test_rewrite_refuses_a_line_that_is_not_from():
    with pytest.raises(ValueError, match="line 4 is not a FROM"):
        rewrite(MULTI, {4: "x"})
