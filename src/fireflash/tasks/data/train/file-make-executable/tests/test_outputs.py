"""Checks for file-make-executable."""

import os
import stat
import subprocess
from pathlib import Path

APP = Path("/app")


def runs(name):
    path = APP / "bin" / f"{name}.sh"
    mode = os.stat(path).st_mode
    assert mode & stat.S_IXUSR and mode & stat.S_IXGRP and mode & stat.S_IXOTH
    out = subprocess.run([str(path)], capture_output=True, text=True, timeout=10, check=False).stdout
    assert out == f"{name}\n"


def test_build_script_runs():
    runs("build")


def test_deploy_script_runs():
    runs("deploy")


def test_clean_script_runs():
    runs("clean")
