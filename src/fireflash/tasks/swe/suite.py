"""A package's image and its test suite run offline inside it: the baseline, then mutations (issue 30, 1-2).

    image = package_image(pkg, source, sandbox_cfg)      # built once (podman/buildah layer cache)
    recorded = record_suite(pkg, image, tool)            # node ids passing in two baseline runs
    results = run_mutations(pkg, image, tool, plan)      # one container for the whole batch

The image is a task-shaped directory (``environment/Dockerfile`` + ``environment/app/``, the sdist's tree)
built by ``tasks.images.task_image``, so ``FROM python:3.11-slim`` becomes the local base and the host's
pip settings reach the build; the test requirements are installed at build time (network), everything
after runs in an offline fork of the image's sandbox (the training sandbox backend, bwrap). The Dockerfile's first lines are the ones every generated
task of the package repeats (``dockerfile``), so each task's build reuses those layers.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from fireflash.sandbox import SandboxConfig, SandboxError, make_backend
from fireflash.tasks.images import task_image
from fireflash.tasks.loader import load_task
from fireflash.tasks.swe.packages import SwePackage
from fireflash.tasks.swe.sdist import swe_cache

INSIDE = Path(__file__).with_name("inside.py")
INSIDE_DIR = "/tmp/fireflash-swe"


class SuiteError(RuntimeError):
    """A package's suite could not be recorded; the message names the package, the log and the fix."""


def dockerfile(pkg: SwePackage) -> str:
    """The environment Dockerfile of ``pkg``'s image and of every task generated from it."""
    reqs = " ".join(pkg.test_requires)
    pythonpath = "/app" if pkg.source_root == "." else f"/app/{pkg.source_root}"
    return (f"FROM python:3.11-slim\n"
            f"RUN pip install --no-cache-dir {reqs}\n"
            f"ENV PYTHONPATH={pythonpath} PYTHONDONTWRITEBYTECODE=1\n"
            f"WORKDIR /app\n"
            f"COPY app/ /app/\n")


def write_image_dir(pkg: SwePackage, app_tree: Path, target: Path) -> Path:
    """A task-shaped directory (``task.toml``, ``environment/``) whose image holds ``app_tree`` at /app."""
    if target.exists():
        shutil.rmtree(target)
    (target / "environment").mkdir(parents=True)
    shutil.copytree(app_tree, target / "environment" / "app", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (target / "environment" / "Dockerfile").write_text(dockerfile(pkg))
    (target / "task.toml").write_text('version = "1.0"\n\n[environment]\nbuild_timeout_sec = 900.0\ncpus = 2\nmemory_mb = 4096\nstorage_mb = 2048\n')
    (target / "instruction.md").write_text(f"image of {pkg.name} {pkg.version} (not a task)\n")
    (target / "tests").mkdir()
    (target / "tests" / "test.sh").write_text("#!/bin/bash\nexit 1  # not a task: the loader needs a verifier\n")
    return target


def package_image(pkg: SwePackage, source: Path, cfg: SandboxConfig, say: Callable[[str], None] = print) -> tuple[Path, str]:
    """(the image's task-shaped folder, the image) of ``pkg``, its whole sdist tree (tests included) at /app;
    built once, then cached by content."""
    folder = write_image_dir(pkg, source, swe_cache() / "images" / f"{pkg.name}-{pkg.version}")
    return folder, task_image(folder, cfg, say=say).image


def _work_dir(pkg: SwePackage, name: str) -> Path:
    work = swe_cache() / "runs" / f"{pkg.name}-{pkg.version}" / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    return work


def _run_inside(pkg: SwePackage, folder: Path, cfg: SandboxConfig, work: Path, plan: dict, timeout_sec: float) -> list[dict]:
    """Run ``inside.py`` on ``plan`` in an offline fork of the image's sandbox (the training sandbox backend)."""
    return asyncio.run(_run_async(pkg, folder, cfg, work, plan, timeout_sec))


async def _run_async(pkg: SwePackage, folder: Path, cfg: SandboxConfig, work: Path, plan: dict,
                     timeout_sec: float) -> list[dict]:
    task = load_task(folder, sandbox=cfg.model_copy(update={"task_images": "always"}), say=lambda _: None)
    (work / "plan.json").write_text(json.dumps(plan))
    backend = make_backend(cfg)
    try:
        parent = await backend.prepare(task.environment, f"swe-{pkg.name}-{pkg.version}")
        box = await parent.fork(offline=True)
        try:
            await box.exec(f"mkdir -p {INSIDE_DIR}", timeout_sec=30)
            await box.write_file(f"{INSIDE_DIR}/inside.py", INSIDE.read_bytes())
            await box.write_file(f"{INSIDE_DIR}/plan.json", (work / "plan.json").read_bytes())
            done = await box.exec(f"python3 {INSIDE_DIR}/inside.py {INSIDE_DIR}/plan.json > {INSIDE_DIR}/run.log 2>&1",
                                  timeout_sec=timeout_sec)
            for name in ("results.jsonl", "run.log"):
                try:
                    (work / name).write_bytes(await box.read_file(f"{INSIDE_DIR}/{name}"))
                except (OSError, SandboxError):
                    pass
        finally:
            await box.close()
    finally:
        await backend.close()
    results = work / "results.jsonl"
    if not results.is_file():
        log = (work / "run.log").read_text(errors="replace")[-2000:] if (work / "run.log").is_file() else ""
        raise SuiteError(f"{pkg.name} {pkg.version}: the run in {task.environment.image} exited {done.exit_code} "
                         f"(timed out: {done.timed_out}) without results; {work / 'run.log'}:\n{log}")
    return [json.loads(line) for line in results.read_text().splitlines()]


def _plan(pkg: SwePackage, timeout_sec: float) -> dict:
    pythonpath = "/app" if pkg.source_root == "." else f"/app/{pkg.source_root}"
    return {"root": "/app", "pythonpath": pythonpath, "pytest_args": list(pkg.test_paths), "timeout_sec": timeout_sec}


def record_suite(pkg: SwePackage, folder: Path, image: str, cfg: SandboxConfig, timeout_sec: float = 300.0) -> dict:
    """Run the suite twice in ``image`` offline; ``{"passing": [node ids passing both], "seconds": one run}``.

    Cached in ``$FIREFLASH_CACHE/swe/runs/<pkg>-<version>/baseline.json`` per image.

    Raises:
        SuiteError: the run failed, timed out, or no test passed.
    """
    cache = swe_cache() / "runs" / f"{pkg.name}-{pkg.version}" / "baseline.json"
    if cache.is_file():
        cached = json.loads(cache.read_text())
        if cached.get("image") == image:
            return cached
    work = _work_dir(pkg, "baseline")
    results = _run_inside(pkg, folder, cfg, work, _plan(pkg, timeout_sec) | {"baseline": True}, 3 * timeout_sec)
    if not results or results[0].get("timed_out") or not results[0].get("passing"):
        raise SuiteError(f"{pkg.name} {pkg.version}: no passing tests recorded in {image} (see {work / 'run.log'}); "
                         "check test_paths and test_requires in fireflash/tasks/swe/packages.py")
    baseline = results[0] | {"image": image}
    cache.write_text(json.dumps(baseline))
    return baseline


def run_mutations(pkg: SwePackage, folder: Path, cfg: SandboxConfig, recorded: list[str], mutations: list[dict], *,
                  max_fail: int, max_keep: int, suite_sec: float, deadline_sec: float) -> list[dict]:
    """Try ``mutations`` (``{"id", "file", "mutated"}``, file relative to /app) in one offline container.

    Each is judged by ``inside.py`` (kept: 1..max_fail recorded tests fail, the same twice, all others pass);
    stops after ``max_keep`` kept or ``deadline_sec``. Returns one result per mutation tried, in order.
    """
    work = _work_dir(pkg, "mutations")
    timeout = max(30.0, 4 * suite_sec)
    plan = _plan(pkg, timeout) | {"recorded": recorded, "mutations": mutations, "max_fail": max_fail,
                                  "max_keep": max_keep, "deadline_sec": deadline_sec}
    return _run_inside(pkg, folder, cfg, work, plan, deadline_sec + 4 * timeout + 60)
