"""Stage at build time what a task's verifier installs at test time, so official ``test.sh`` files run offline.

    staging = stage_verifier(record, paths.tests_dir, cfg, tool, say)   # None: test.sh installs nothing

Issue 26 (network by phase): builds may use the network, verification may not. For what ``tests/test.sh``
installs (read by tasks/verifier_needs.py) this stages, with the network and the host's package-index
settings (tasks/image_build.py):

1. **apt packages** (``apt-get install -y curl``), and ``python3.X`` for each ``uvx -p 3.X`` the image lacks,
   as one final layer on the task's image (``FROM <task image>``, ``USER root``, one ``RUN``, ``USER`` as it
   was); tagged ``localhost/fireflash/env:v-<digest>`` by the task image's id and the needs. The verifier's
   own ``apt-get update`` then finds no sources (``APT_CONFIG``, grading/verifier.py) and its ``apt-get install``
   finds the packages installed.
2. **uv** at the version the installer URL names (``astral.sh/uv/0.9.5/install.sh``), from the ``uv`` wheel on
   PyPI (it carries the ``uv`` and ``uvx`` binaries), and
3. **a wheelhouse**: every ``-w`` / ``--with`` / ``pip install`` / ``uv pip install`` requirement and its
   dependencies, as binary wheels for the image's Python (``pip download --only-binary=:all:``, one resolution
   per command, as that command resolves them).

(2) and (3) go into a host directory, ``$FIREFLASH_CACHE/images/verifier/<digest>/`` (``bin/uv``, ``bin/uvx``,
``wheels/``, ``env``, ``apt.conf``, ``manifest.json``), that becomes ``TaskEnvironment.verifier_tools``: the
sandbox backend binds it read-only at ``/.fireflash-verifier`` (root inside an image sandbox cannot write it),
and the verifier points uv and pip at it with the network off (grading/verifier.py). A digest seen before
(image tag and ``manifest.json`` both present) is a cache hit: nothing is built or downloaded.

What cannot be staged (a URL download, an apt package the base's archive lacks, a Python version the image's
distribution does not have, a requirement with no wheel) is named in ``VerifierStaging.missing``, printed, and
shown by gate 3; it is never dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import resource
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from fireflash.sandbox.containers import ContainerCommandFailed, ContainerTool, run_logged
from fireflash.tasks.image_build import images_cache, run_build
from fireflash.tasks.verifier_needs import VerifierNeeds, verifier_needs

STAGING_VERSION = "1"  # bump when what is staged changes, so cached stagings are redone
ENV_REPO = "localhost/fireflash/env"
MARKER = "fireflash-staging:"
# the uv installer's env script (what `source $HOME/.local/bin/env` reads after `curl ... | sh`)
ENV_SCRIPT = """#!/bin/sh
# written by FireFlash's verifier, as uv's installer writes it: $HOME/.local/bin holds the staged uv and uvx
case ":${PATH}:" in
    *:"$HOME/.local/bin":*) ;;
    *) export PATH="$HOME/.local/bin:$PATH" ;;
esac
"""
# offline, `apt-get update` has nothing to fetch and succeeds; `apt-get install` finds the staged packages
APT_CONF = ('Dir::Etc::sourcelist "/dev/null";\nDir::Etc::sourceparts "/.fireflash-verifier/no-sources";\n'
            'APT::Sandbox::User "root";\n')
# the staging layer's one RUN step; what it could not install, the probe below finds
_STAGE_SCRIPT = """set -e
pkgs="{apt}"
for v in {pythons}; do command -v python$v >/dev/null 2>&1 || pkgs="$pkgs python$v"; done
if [ -n "$pkgs" ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || true
  found=""
  for p in $pkgs; do if apt-cache show "$p" >/dev/null 2>&1; then found="$found $p"; fi; done
  if [ -n "$found" ]; then apt-get install -y -qq $found; fi
  rm -rf /var/lib/apt/lists/*
fi
"""
# what the built image has: its python3 version (or the first python3.X asked for) and the staged names it lacks
_PROBE = """py=""
for exe in python3 $(for v in {pythons}; do echo python$v; done); do
  [ -n "$py" ] || py=$($exe -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
done
missing=""
for p in {wanted}; do
  case "$p" in python3.*) command -v "$p" >/dev/null 2>&1 || missing="$missing $p";;
  *) dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p";; esac
done
echo "{marker} python=$py missing=$missing"
"""


class VerifierStaging(BaseModel):
    """What was staged for one task's verifier (STYLE.md 8); kept in ``ImageRecord.verifier`` and gate 3's detail."""

    schema_version: int = 1
    needs: VerifierNeeds
    base_image: str = Field(description="The task's image before staging.")
    image: str = Field(description="The image sandboxes use: base_image, plus a layer when apt packages were staged.")
    tools_dir: str = Field(description="Host directory bound read-only at /.fireflash-verifier (TaskEnvironment.verifier_tools).")
    python: str | None = Field(None, description="The Python version wheels were chosen for ('3.13').")
    uv_version: str | None = None
    wheels: list[str] = Field(default_factory=list, description="File names in the wheelhouse.")
    missing: list[str] = Field(default_factory=list, description="Network needs that could not be staged, by name.")
    cached: bool = False
    build_sec: float = 0.0
    log_path: str | None = None

    def summary(self) -> str:
        """One line for build output and gate reports."""
        parts = []
        if self.needs.apt:
            parts.append("apt " + " ".join(self.needs.apt))
        if self.uv_version:
            parts.append(f"uv {self.uv_version}")
        if self.wheels:
            parts.append(f"{len(self.wheels)} wheels for Python {self.python}")
        text = "; ".join(parts) or "nothing"
        if self.missing:
            text += "; NOT staged: " + "; ".join(self.missing)
        return text


def staging_digest(image_id: str, needs: VerifierNeeds) -> str:
    """sha256 (hex) of what a staging depends on: the task image's id and the needs read from test.sh."""
    body = needs.model_dump(exclude={"covered", "script"})
    return hashlib.sha256(f"fireflash-verifier-v{STAGING_VERSION}\0{image_id}\0{json.dumps(body, sort_keys=True)}"
                          .encode()).hexdigest()


def stage_verifier(
    task_id: str,
    image: str,
    image_id: str,
    tests_dir: Path,
    tool: ContainerTool,
    say: Callable[[str], None] = print,
    on_line: Callable[[str], None] | None = None,
    timeout_sec: float = 1800.0,
    rebuild: bool = False,
) -> VerifierStaging | None:
    """Stage what ``tests_dir/test.sh`` installs at test time (module docstring); None when it installs nothing.

    Args:
        image, image_id: the task's built image (reference and full id).
        say: one line per event the user must see (what is staged, what could not be).
        on_line: every line of build and download output (progress).

    Returns:
        The staging record; its ``missing`` names what could not be staged. Nothing raises for a task's needs:
        a failed step is a ``missing`` entry, so the gates can report it.
    """
    needs = verifier_needs(tests_dir / "test.sh", tests_dir)
    if not needs.needs_staging:
        return None
    digest = staging_digest(image_id, needs)
    tools = images_cache() / "verifier" / digest[:32]
    manifest = tools / "manifest.json"
    # a final layer even when it installs nothing: its build reports the image's python3, which wheels are for
    tag = f"{ENV_REPO}:v-{digest[:30]}" if needs.apt or needs.pythons or needs.requirements else image
    if not rebuild and manifest.is_file() and tool.exists(tag):
        staged = VerifierStaging.model_validate_json(manifest.read_text()).model_copy(update={"cached": True})
        # a failed download may have been the network's passing fault: tried again; the rest is kept
        if not any(m.startswith(("uv ", "requirements ")) for m in staged.missing):
            say(f"{task_id}: verifier staged (cached): {staged.summary()}")
            return staged
    start = time.monotonic()
    say(f"{task_id}: staging what tests/test.sh installs at test time (the verifier runs offline)")
    safe_id = re.sub(r"[^\w.-]", "_", task_id)[:80]
    log = images_cache() / "logs" / f"{safe_id}-verifier-{digest[:12]}.log"
    missing = list(needs.unstaged)
    python = None
    if tag != image:
        python, lacking = _stage_layer(tool, image, tag, needs, digest, log, on_line, timeout_sec)
        if tag != image and not tool.exists(tag):
            missing.append(f"the apt layer failed to build (log {log})")
            tag = image
        missing += [_lacking(name) for name in lacking]
    python = (needs.pythons[0] if needs.pythons else None) or python
    work = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=_parent(tools)))
    try:
        (work / "bin").mkdir()
        (work / "wheels").mkdir()
        (work / "no-sources").mkdir()
        if needs.uv_version:
            why = _stage_uv(needs.uv_version, work / "bin", log, on_line)
            if why:
                missing.append(f"uv {needs.uv_version}: {why}")
        for group in needs.requirements:
            if python is None:
                missing.append(f"requirements {' '.join(group)}: the image has no python3 to choose wheels for")
                continue
            why = _download_wheels(group, python, work / "wheels", log, on_line)
            if why:
                missing.append(f"requirements {' '.join(group)}: {why}")
        (work / "env").write_text(ENV_SCRIPT)
        (work / "apt.conf").write_text(APT_CONF)
        staged = VerifierStaging(
            needs=needs, base_image=image, image=tag, tools_dir=str(tools), python=python,
            uv_version=needs.uv_version if (work / "bin" / "uv").is_file() else None,
            wheels=sorted(p.name for p in (work / "wheels").iterdir()), missing=missing,
            build_sec=round(time.monotonic() - start, 1), log_path=str(log),
        )
        (work / "manifest.json").write_text(staged.model_dump_json(indent=1))
        _world_readable(work)
        if tools.exists() and (rebuild or not (tools / "manifest.json").is_file()):
            shutil.rmtree(tools, ignore_errors=True)  # a rebuild, or one interrupted before its manifest
        try:
            os.rename(work, tools)  # whole or not at all: a cache hit never sees a half-written directory
        except OSError:
            if not (tools / "manifest.json").is_file():  # not another build of the same digest finishing first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"{task_id}: verifier staged in {staged.build_sec:.0f} s: {staged.summary()}")
    return staged


def _lacking(name: str) -> str:
    """What the user reads for a staged package the built image still lacks, with the fix."""
    if name.startswith("python3."):
        version = name.removeprefix("python")
        return (f"Python {version} (uvx -p {version}): not in the image, and its apt archive has no {name} package "
                f"(Debian trixie has 3.13, bookworm 3.11): map the task's FROM image to a base that has it "
                "(sandbox.base_images) or install it in the Dockerfile")
    return f"apt package {name}: not in the image's apt archive (or the image has no apt-get)"


def _parent(tools: Path) -> Path:
    tools.parent.mkdir(parents=True, exist_ok=True)
    return tools.parent


def _stage_layer(
    tool: ContainerTool, image: str, tag: str, needs: VerifierNeeds, digest: str, log: Path,
    on_line: Callable[[str], None] | None, timeout_sec: float,
) -> tuple[str | None, list[str]]:
    """Build ``tag``: the apt packages and missing Pythons on ``image``, as root, its USER kept.

    Returns:
        (the python3 version of the result or None, the package names that could not be installed).
    """
    user = tool.inspect(image).user
    script = _STAGE_SCRIPT.format(apt=" ".join(needs.apt), pythons=" ".join(needs.pythons), marker=MARKER)
    lines = [f"FROM {image}", "USER root", "RUN " + json.dumps(["/bin/sh", "-c", script])]
    if user:
        lines.append(f"USER {user}")
    work = images_cache() / "build" / f"verifier-{digest[:32]}"
    done, _ = run_build(tool, "\n".join(lines) + "\n", {}, work, tag, work, log,
                        {"fireflash.verifier-staging": digest}, on_line, timeout_sec)
    if done.returncode != 0:
        return None, [*needs.apt, *(f"python{v}" for v in needs.pythons)]
    # asked of the image, not read from the build's output: a build whose RUN step was cached prints none
    wanted = " ".join([*needs.apt, *(f"python{v}" for v in needs.pythons)])
    out = _run_in(tool, tag, _PROBE.format(wanted=wanted, pythons=" ".join(needs.pythons), marker=MARKER))
    found = re.findall(rf"^{MARKER} python=(\S*) missing=(.*)$", out, re.MULTILINE)
    if not found:
        return None, wanted.split()
    python, lacking = found[-1]
    return python or None, lacking.split()


def _run_in(tool: ContainerTool, image: str, script: str) -> str:
    """The output of ``sh -c script`` run as root in a throwaway container of ``image``, offline ('' on failure)."""
    try:
        if tool.kind == "buildah":
            container = tool.run("from", "--pull-never", image).strip()
            try:
                return tool.run("run", "--network", "none", "--user", "0", container, "--", "/bin/sh", "-c", script)
            finally:
                tool.run("rm", container)
        # rlimits no higher than this process's own: runc cannot raise them on such a host (measured: podman's
        # defaults fail with "error setting rlimit ... operation not permitted")
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limits = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"] if tool.kind == "podman" else []
        return tool.run("run", "--rm", "--network", "none", "--user", "0", *limits, "--entrypoint", "/bin/sh", image,
                        "-c", script, timeout_sec=300)
    except ContainerCommandFailed:
        return ""


def _pip(args: list[str], log: Path, on_line: Callable[[str], None] | None) -> str | None:
    """Run ``python -m pip`` (the host's, with its own index and CA settings); None, or why it failed."""
    step = log.with_suffix(f".pip-{hashlib.sha256(' '.join(args).encode()).hexdigest()[:8]}.log")
    done = run_logged([sys.executable, "-m", "pip", *args], step, on_line, 600)
    with open(log, "a") as out:
        out.write(step.read_text(errors="replace"))
    step.unlink(missing_ok=True)
    if done.returncode == 0:
        return None
    errors = [line for line in done.tail.splitlines() if "ERROR" in line or "No matching" in line]
    return (errors[-1] if errors else done.tail.splitlines()[-1] if done.tail else "pip failed").strip()[:300]


def _platforms() -> list[str]:
    arch = platform.machine()
    glibc = [f"manylinux_2_{minor}_{arch}" for minor in (39, 36, 35, 34, 31, 28, 27, 24, 17, 12, 5)]
    return [*glibc, f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}", f"linux_{arch}"]


def _download_wheels(group: list[str], python: str, dest: Path, log: Path,
                     on_line: Callable[[str], None] | None) -> str | None:
    """Binary wheels of ``group`` and its dependencies for CPython ``python`` on this machine's architecture."""
    abi = "cp" + python.replace(".", "")
    args = ["download", "--disable-pip-version-check", "--only-binary=:all:", "--python-version", python,
            "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none", "-d", str(dest)]
    for tag in _platforms():
        args += ["--platform", tag]
    return _pip([*args, "--platform", "any", *group], log, on_line)


def _stage_uv(version: str, bin_dir: Path, log: Path, on_line: Callable[[str], None] | None) -> str | None:
    """``uv`` and ``uvx`` of ``version`` from its PyPI wheel (kept once in the cache); None, or why not."""
    wheels = images_cache() / "verifier" / "uv-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"uv-{version}-*.whl"))
    if not found:
        args = ["download", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
        for tag in _platforms():
            args += ["--platform", tag]
        why = _pip([*args, f"uv=={version}"], log, on_line)
        if why:
            return why
        found = sorted(wheels.glob(f"uv-{version}-*.whl"))
        if not found:
            return "pip downloaded no uv wheel"
    shared = images_cache() / "verifier" / f"uv-{version}"
    if not (shared / "uvx").is_file():
        part = Path(tempfile.mkdtemp(prefix=f".uv-{version}-", dir=shared.parent))
        with zipfile.ZipFile(found[0]) as wheel:
            for name in ("uv", "uvx"):
                (part / name).write_bytes(wheel.read(f"uv-{version}.data/scripts/{name}"))
                os.chmod(part / name, 0o755)
        os.chmod(part, 0o755)
        try:
            os.rename(part, shared)
        except OSError:  # another build extracted it first
            shutil.rmtree(part, ignore_errors=True)
    for name in ("uv", "uvx"):  # hard links: one 50 MB copy for every task staging this version
        os.link(shared / name, bin_dir / name)
    return None


def _world_readable(root: Path) -> None:
    """Image users (any uid) read the tools through the read-only bind: dirs 755, files 644, binaries 755."""
    for dirpath, dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in files:
            path = Path(dirpath) / name
            os.chmod(path, 0o755 if path.parent.name == "bin" else 0o644)
