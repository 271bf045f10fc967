"""Local base images for machines no container registry reaches: Debian from Debian's archive alone.

    localhost/fireflash/debian:bookworm   mmdebstrap --variant=minbase bookworm, imported (~1.5 min)
    localhost/fireflash/debian:trixie     the same for trixie (Python 3.13)
    localhost/fireflash/python:3.13       trixie + python3, pip, venv; `python` and `pip` on PATH, pip
    localhost/fireflash/python:3.11       installs system-wide as in the python:3.x images (bookworm)

``fireflash images bases`` builds the two Debian bases; the Python ones are built from them the first time
a task's ``FROM python:3.x`` is substituted (sandbox.base_images). Every base is built once: an existing
one is kept. mmdebstrap uses the host's own Debian mirrors and apt proxy (as /etc/apt has them), so it
works wherever the host's ``apt-get`` does.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from fireflash.sandbox.config import BOOKWORM, PYTHON_311, PYTHON_313, TRIXIE
from fireflash.sandbox.containers import ContainerTool, run_logged
from fireflash.tasks.image_build import images_cache, run_build

DEBIAN_BASES = {TRIXIE: "trixie", BOOKWORM: "bookworm"}
PYTHON_BASES = {PYTHON_313: TRIXIE, PYTHON_311: BOOKWORM}
DEFAULT_ARCHIVE, DEFAULT_SECURITY = "http://deb.debian.org/debian", "http://deb.debian.org/debian-security"
_PYTHON_DOCKERFILE = """FROM {debian}
RUN apt-get update \\
 && apt-get install -y --no-install-recommends python3 python3-pip python3-venv ca-certificates netbase tzdata \\
 && rm -rf /var/lib/apt/lists/* \\
 && ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 /usr/local/bin/pip \\
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
ENV LANG=C.UTF-8
CMD ["python3"]
"""


class BaseBuildError(RuntimeError):
    """A local base image could not be built; the message has the log's tail, its path and the fix."""


def host_mirrors(apt_dir: Path = Path("/etc/apt"), codename: str | None = None) -> tuple[str, str]:
    """The host's Debian archive and security mirrors (from its sources.list files), or Debian's defaults.

    Args:
        codename: the host's release (``VERSION_CODENAME``); read from /etc/os-release when None.
    """
    if codename is None:
        text = Path("/etc/os-release").read_text() if Path("/etc/os-release").is_file() else ""
        m = re.search(r"^VERSION_CODENAME=\"?(\w+)", text, re.MULTILINE)
        codename = m[1] if m else ""
    entries: list[tuple[str, list[str]]] = []  # (uri, suites)
    files = [apt_dir / "sources.list"] + sorted((apt_dir / "sources.list.d").glob("*.list"))
    for path in files:
        for line in path.read_text().splitlines() if path.is_file() else []:
            words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                entries.append((words[1], [words[2]]))
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields = dict(re.findall(r"^([\w-]+):\s*(.*)$", stanza, re.MULTILINE))
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes").lower() != "no":
                entries += [(uri, fields.get("Suites", "").split()) for uri in fields.get("URIs", "").split()]
    archive = next((u for u, s in entries if codename and codename in s), DEFAULT_ARCHIVE)
    security = next((u for u, s in entries if codename and f"{codename}-security" in s), DEFAULT_SECURITY)
    return archive.rstrip("/"), security.rstrip("/")


def host_apt_proxies(dump: str | None = None) -> list[str]:
    """``Acquire::http(s)::Proxy`` settings of the host's apt (``apt-config dump``), as mmdebstrap --aptopt values."""
    if dump is None:
        done = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, check=False) \
            if shutil.which("apt-config") else None
        dump = done.stdout if done and done.returncode == 0 else ""
    return [f'{key} "{value}"' for key, value in re.findall(r'^(Acquire::https?::Proxy) "([^"]+)";', dump, re.MULTILINE)]


def mmdebstrap_argv(suite: str, target: Path, archive: str, security: str, proxies: list[str]) -> list[str]:
    """The mmdebstrap command for a minbase ``suite`` tarball with its updates and security suites."""
    argv = ["mmdebstrap", "--variant=minbase", *(f"--aptopt={p}" for p in proxies), suite, str(target)]
    return argv + [f"deb {archive} {suite} main", f"deb {archive} {suite}-updates main",
                   f"deb {security} {suite}-security main"]


def build_debian_base(tool: ContainerTool, ref: str, on_line: Callable[[str], None] | None = None) -> float:
    """mmdebstrap the suite of ``ref`` (a ``DEBIAN_BASES`` key) and import it as ``ref``.

    Returns:
        Seconds taken (mmdebstrap and import).

    Raises:
        BaseBuildError: mmdebstrap missing or failed, or the tool cannot import (buildah alone).
    """
    suite = DEBIAN_BASES[ref]
    if shutil.which("mmdebstrap") is None:
        raise BaseBuildError(f"{ref}: mmdebstrap is not installed; run `make setup` or apt-get install -y mmdebstrap")
    if tool.kind == "buildah":
        raise BaseBuildError(f"{ref}: buildah cannot import a root filesystem; install podman (make setup does)")
    work = images_cache() / "bases"
    work.mkdir(parents=True, exist_ok=True)
    tarball, log = work / f"{suite}.tar", images_cache() / "logs" / f"base-{suite}.log"
    archive, security = host_mirrors()
    start = time.monotonic()
    try:
        done = run_logged(mmdebstrap_argv(suite, tarball, archive, security, host_apt_proxies()), log, on_line, 1800)
        if done.returncode != 0:
            why = "timed out after 1800 s" if done.timed_out else f"exited {done.returncode}"
            raise BaseBuildError(f"{ref}: mmdebstrap {why}; last lines of {log}:\n{done.tail}\n"
                                 f"fix: check that `apt-get update` works on this host (mirror {archive})")
        tool.run("import", "--change", 'CMD ["bash"]', "--change", f"LABEL fireflash.base={ref}",
                 str(tarball), ref, timeout_sec=600)
    finally:
        tarball.unlink(missing_ok=True)
    return time.monotonic() - start


def build_python_base(tool: ContainerTool, ref: str, on_line: Callable[[str], None] | None = None) -> float:
    """Build ``ref`` (a ``PYTHON_BASES`` key) from its Debian base, which must exist.

    Raises:
        BaseBuildError: the build failed (log tail and path in the message).
    """
    debian = PYTHON_BASES[ref]
    name = ref.rsplit("/", 1)[-1].replace(":", "-")
    work, log = images_cache() / "bases" / name, images_cache() / "logs" / f"base-{name}.log"
    done, _ = run_build(tool, _PYTHON_DOCKERFILE.format(debian=debian), {}, work, ref, work, log,
                        {"fireflash.base": ref}, on_line, 1800)
    if done.returncode != 0:
        raise BaseBuildError(f"{ref}: build from {debian} exited {done.returncode}; last lines of {log}:\n{done.tail}\n"
                             "fix: check that `apt-get update` works on this host")
    return done.seconds


def ensure_base(tool: ContainerTool, ref: str, say: Callable[[str], None] = print,
                on_line: Callable[[str], None] | None = None) -> bool:
    """Make local base ``ref`` exist, building it (and the Debian base under it) when missing.

    Returns:
        True when something was built now, False when ``ref`` already existed.

    Raises:
        BaseBuildError: ``ref`` is not one of FireFlash's bases and is missing, or building failed.
    """
    if tool.exists(ref):
        return False
    if ref in PYTHON_BASES:
        ensure_base(tool, PYTHON_BASES[ref], say, on_line)
        say(f"building base {ref} from {PYTHON_BASES[ref]} (once)")
        seconds = build_python_base(tool, ref, on_line)
    elif ref in DEBIAN_BASES:
        say(f"building base {ref} with mmdebstrap from Debian's archive (once, ~2 min)")
        seconds = build_debian_base(tool, ref, on_line)
    else:
        known = ", ".join([*DEBIAN_BASES, *PYTHON_BASES])
        raise BaseBuildError(f"{ref} is not in the local image store and is not one FireFlash builds ({known}); "
                             f"build or load it with {tool.kind}, or map to another image in sandbox.base_images")
    say(f"built base {ref} in {seconds:.0f} s")
    return True
