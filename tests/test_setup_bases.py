"""scripts/setup_bases.sh (run by `make setup`): builds the local Debian bases once, never fails the set-up.

The container tools and `fireflash` are stand-in scripts on a PATH of their own, so nothing is built here;
tests/tasks/test_images.py builds (or finds) the real trixie base.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "setup_bases.sh"


def _bin(root: Path, tools: dict[str, str]) -> Path:
    """A PATH directory with ``dirname`` and the given stand-in scripts (name → body)."""
    path = root / "bin"
    path.mkdir(parents=True, exist_ok=True)
    (path / "dirname").symlink_to(shutil.which("dirname"))
    for name, body in tools.items():
        (path / name).write_text(f"#!/bin/bash\n{body}\n")
        (path / name).chmod(0o755)
    return path


def _run(tmp_path: Path, tools: dict[str, str], fireflash_rc: int = 0, **env: str) -> tuple[subprocess.CompletedProcess, str]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    (venv / "bin" / "fireflash").write_text(f'#!/bin/bash\necho "$@" >> {calls}\nexit {fireflash_rc}\n')
    (venv / "bin" / "fireflash").chmod(0o755)
    done = subprocess.run(["/bin/bash", str(SCRIPT), str(venv)], capture_output=True, text=True, timeout=30,
                          env={"PATH": str(_bin(tmp_path, tools)), **env}, check=False)
    return done, calls.read_text() if calls.exists() else ""


@pytest.mark.unit
def test_builds_the_bases_with_the_cli_when_podman_and_mmdebstrap_exist(tmp_path):
    done, calls = _run(tmp_path, {"podman": "exit 0", "mmdebstrap": "exit 0"})
    assert done.returncode == 0 and calls == "images bases\n"
    assert "local Debian bases (built once" in done.stdout


@pytest.mark.unit
@pytest.mark.parametrize("present", [{}, {"podman": "exit 0"}, {"mmdebstrap": "exit 0"}])
def test_missing_tools_only_warn(tmp_path, present):
    done, calls = _run(tmp_path, present)
    assert done.returncode == 0 and calls == ""
    assert "warning: podman or mmdebstrap missing" in done.stderr and "fireflash images bases" in done.stderr


@pytest.mark.unit
def test_a_failed_build_only_warns(tmp_path):
    done, calls = _run(tmp_path, {"podman": "exit 0", "mmdebstrap": "exit 0"}, fireflash_rc=1)
    assert done.returncode == 0 and calls == "images bases\n"
    assert "warning: the local Debian bases did not build" in done.stderr


@pytest.mark.unit
def test_can_be_skipped(tmp_path):
    done, calls = _run(tmp_path, {"podman": "exit 0", "mmdebstrap": "exit 0"}, FIREFLASH_SETUP_BASES="0")
    assert done.returncode == 0 and calls == "" and "skipped the local Debian bases" in done.stdout


@pytest.mark.unit
def test_setup_runs_it_after_installing_fireflash():
    text = (SCRIPT.parent / "setup.sh").read_text()
    assert text.index('bash scripts/setup_bases.sh "$venv"') > text.index('"${pip[@]}" -e ".[dev]"')
    assert "scripts/setup_bases.sh" in (SCRIPT.parents[1] / "Makefile").read_text()  # an edit reruns the set-up
    assert os.access(SCRIPT, os.X_OK)
