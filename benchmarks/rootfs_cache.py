"""Disk bytes and seconds of exporting N task images that share a base (issue 30), as rootfs.py's docstring reports.

    PYTHONPATH=src python benchmarks/rootfs_cache.py --images 3 --base localhost/fireflash/python:3.11

Builds N tasks whose Dockerfile is ``FROM <base>`` plus a ``COPY`` of a small tree that differs per task
(with the task image code, cached by podman after the first run), exports each into a fresh cache with
``image_rootfs`` and prints seconds per export and the cache's disk use (``du``, hard links counted once).
Run it against an older checkout (``PYTHONPATH=<old>/src``) for the before numbers.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from fireflash.sandbox import SandboxConfig
from fireflash.sandbox.containers import find_tool
from fireflash.sandbox.rootfs import image_rootfs
from fireflash.tasks.images import task_image


def build(tmp: Path, base: str, n: int) -> list[str]:
    refs = []
    for i in range(n):
        task = tmp / f"bench-{i}"
        (task / "environment" / "app" / "pkg").mkdir(parents=True)
        (task / "instruction.md").write_text("Not a task: benchmarks/rootfs_cache.py.\n")
        (task / "task.toml").write_text('version = "1.0"\n')
        for j in range(50):  # ~200 KB of source per task, one function mutated per task
            (task / "environment" / "app" / "pkg" / f"m{j}.py").write_text(
                f"def f{j}(x):\n    return x {'<' if i == j else '<='} {j}\n" + "# pad\n" * 600)
        (task / "environment" / "Dockerfile").write_text(f"FROM {base}\nCOPY app/ /app/\n")
        refs.append(task_image(task, SandboxConfig(), find_tool("auto"), say=lambda line: None).image)
    return refs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=3)
    parser.add_argument("--base", default="localhost/fireflash/python:3.11")
    parser.add_argument("--dir", default="/var/tmp", help="where the caches go (not tmpfs)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        refs = build(Path(tmp), args.base, args.images)
        cache = Path(tmp) / "rootfs"
        tool = find_tool("auto")
        for ref in refs:
            start = time.monotonic()
            image_rootfs(tool, ref, cache, SandboxConfig().image_uid_base)
            print(f"export {ref}: {time.monotonic() - start:.1f} s")
        dirs = sorted(str(p) for p in cache.iterdir() if p.is_dir())
        du = subprocess.run(["du", "-s", "-B1", "-c", *dirs], capture_output=True, text=True, check=True).stdout
        for line in du.splitlines():
            print(f"du {int(line.split()[0]) / 1e6:8.1f} MB  {Path(line.split()[1]).name}")


if __name__ == "__main__":
    main()
