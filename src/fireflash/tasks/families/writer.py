"""Writing generated tasks as Harbor directories (``write_task``) and the set once per cache directory
(``write_tasks``, reused while its ``generated.json`` manifest matches)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from fireflash.tasks.families.catalogue import generate
from fireflash.tasks.families.draw import TaskSpec

_TOML = """version = "1.0"

[metadata]
author_name = "FireFlash (generated)"
difficulty = "easy"
category = "{category}"
tags = ["{category}", "generated", "{family}"]
tier = 1

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 60.0
cpus = 1
memory_mb = 1024
storage_mb = 512
allow_internet = false
"""
_GIT_IDENTITY = ('ENV GIT_AUTHOR_NAME="FireFlash" GIT_AUTHOR_EMAIL="tasks@fireflash.invalid" '
                 'GIT_COMMITTER_NAME="FireFlash" GIT_COMMITTER_EMAIL="tasks@fireflash.invalid"')
# python:3.11-slim has no git; the host's userland skips an install of what it has (tasks/dockerfile.py)
_INSTALL_GIT = "RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*"
_TEST_SH = """#!/bin/bash
# The sandbox's python3 may lack pytest: FireFlash's stdlib runner (the verifier writes it) runs the checks.
cd /app || exit 1
python3 /tests/junit_runner.py --junitxml /logs/verifier/junit.xml /tests/test_outputs.py
"""


def write_task(task_id: str, spec: TaskSpec, out_dir: Path) -> Path:
    """Write ``spec`` as a Harbor task directory ``out_dir/task_id`` (replacing an older one); returns it."""
    root = out_dir / task_id
    tmp = out_dir / f".{task_id}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "environment" / "app").mkdir(parents=True)
    (tmp / "solution").mkdir()
    (tmp / "tests").mkdir(exist_ok=True)
    for rel, text in spec.files.items():  # the workspace, and the pristine copies the checks compute from
        for path in (tmp / "environment" / "app" / rel, tmp / "tests" / "data" / rel):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    docker = ["FROM python:3.11-slim-bookworm"] + ([_INSTALL_GIT, "WORKDIR /app", _GIT_IDENTITY] if spec.git
                                                    else ["WORKDIR /app"])
    docker += ["COPY app/ /app/"] + [f"RUN {line}" for line in spec.setup]
    (tmp / "environment" / "Dockerfile").write_text("\n".join(docker) + "\n")
    (tmp / "instruction.md").write_text(spec.instruction + "\n")
    (tmp / "task.toml").write_text(_TOML.format(category=spec.category, family=spec.family))
    (tmp / "solution" / "solve.sh").write_text("#!/bin/bash\n" + spec.solution + "\n")
    (tmp / "tests" / "test.sh").write_text(_TEST_SH)
    (tmp / "tests" / "test_outputs.py").write_text(spec.checks)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


MANIFEST = "generated.json"
LAYOUT = 3  # what write_task writes besides the specs (2: git in git tasks' images; 3: no runner copy); a change rewrites


def write_tasks(per_family: int, out_dir: Path, seed: int = 0, families: Sequence[str] = ()) -> list[Path]:
    """Generate and write the tasks once: reused while ``out_dir``'s manifest matches what would be written."""
    pairs = generate(per_family, seed, families)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / MANIFEST
    digest = hashlib.sha256(json.dumps([(i, asdict(s)) for i, s in pairs], sort_keys=True).encode()).hexdigest()
    want = {"per_family": per_family, "seed": seed, "digest": digest, "layout": LAYOUT}
    if manifest.is_file() and json.loads(manifest.read_text()) == want:
        return [out_dir / task_id for task_id, _ in pairs]
    paths = [write_task(task_id, spec, out_dir) for task_id, spec in pairs]
    manifest.write_text(json.dumps(want))
    return paths
