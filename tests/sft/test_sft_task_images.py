"""`fireflash sft` loads its tasks as training does: ``sandbox.task_images`` places each in its image (issue 26).

Before, SFT loaded with the host-userland loader only, so a task the host cannot run (an apt package it lacks,
RUN writing /usr, ...) was skipped as a load error however ``sandbox.task_images`` was set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fireflash.sandbox.config import SandboxConfig
from fireflash.cli.sft import sft_tasks
from fireflash.sft.config import SFTConfig

# apt `tree` (the host lacks it), pip six==1.16.0, two stages, RUN writing /usr: the host cannot run it
IMAGE_TASK = Path(__file__).parents[1] / "tasks" / "fixtures" / "images" / "ubuntu-apt-pip"


def test_never_skips_a_task_that_needs_its_image_naming_task_and_field(tmp_path, capsys):
    tasks, copies = sft_tasks(SFTConfig(tasks=[str(IMAGE_TASK)]), tmp_path, sandbox=SandboxConfig(task_images="never"))
    assert tasks == [] and copies == []
    out = " ".join(capsys.readouterr().out.split())
    assert "skipped task ubuntu-apt-pip: the host's userland cannot run it" in out
    assert "set sandbox.task_images = 'auto'" in out


@pytest.mark.images
@pytest.mark.timeout(900)
def test_auto_places_a_task_the_host_cannot_run_in_its_image(tmp_path, monkeypatch):
    """The image is content-tagged: built once (tests/tasks/test_images.py builds the same one) and reused."""
    from fireflash.sandbox.containers import ContainerToolMissing, find_tool

    try:
        tool = find_tool("auto")
    except ContainerToolMissing as e:
        pytest.skip(f"no container tool: {e}")
    if os.geteuid() != 0:
        pytest.skip("image builds need root here (CI runs as root)")
    monkeypatch.setenv("FIREFLASH_CACHE", str(tmp_path / "cache"))
    tasks, _ = sft_tasks(SFTConfig(tasks=[str(IMAGE_TASK)]), tmp_path / "run", sandbox=SandboxConfig())
    assert [t.id for t in tasks] == ["ubuntu-apt-pip"]
    image = tasks[0].environment.image
    assert image and image.startswith("localhost/fireflash/env:") and tool.exists(image)
    assert "multi-stage builds need a container backend" in tasks[0].metadata["runs_in_image"]  # why
    assert tasks[0].environment.files_dir is None  # the files come from the image, not the host's copy
