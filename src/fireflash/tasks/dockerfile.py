"""Materialise a task's Dockerfile without a container engine, when it uses a supported subset.

Supported (DESIGN.md: the embedded sandbox has no container engine):
  FROM a Debian / Python / Ubuntu / Terminal-Bench base (the sandbox runs the host's Debian userland
  instead, so the image's own Python version is not reproduced); WORKDIR; ENV; ARG (build-time
  defaults); COPY/ADD of local files to paths under the final WORKDIR (staged into one directory that
  the sandbox copies to the workdir, so all copies happen before any RUN step); RUN shell steps that
  work offline, run once in the parent in order; ``apt-get install`` of packages already installed on
  the host (skipped); ``pip install`` into a task venv at ``<WORKDIR>/.venv`` (put first on PATH) that
  sees the system's packages and never reaches an index, so it succeeds only for what is installed
  (a bare name or ``==`` pin the host's python3 lacks is refused at load time). CMD, ENTRYPOINT, EXPOSE, LABEL, HEALTHCHECK, STOPSIGNAL and
  MAINTAINER do not change files and are ignored.

Anything else raises ``NeedsContainerBackend`` naming the file, line and instruction.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from fireflash.protocols import cache_root

BASE_IMAGE = re.compile(
    r"^(docker\.io/)?(library/)?(debian|python|ubuntu|buildpack-deps)(:[\w.\-]+)?(@sha256:[0-9a-f]+)?$"
    r"|^ghcr\.io/laude-institute/t-bench/(python-[\w\-]+|ubuntu-[\w\-]+|debian-[\w\-]+)(:[\w.\-]+)?$"
)
IGNORED = {"CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "HEALTHCHECK", "STOPSIGNAL", "MAINTAINER"}
NETWORK_COMMANDS = re.compile(
    r"(^|[\s;&|(])(curl|wget|git\s+clone|npm\s+(install|ci)|cargo\s+install|go\s+get)\b"
)
PIP_INSTALL = re.compile(r"^(?:python3?\s+-m\s+pip|pip3?|uv\s+pip)\s+install\s+(?P<args>.*)$")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:==(?P<version>[A-Za-z0-9.!+_-]+))?$")
PIP_VALUE_OPTIONS = {
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-e",
    "--editable",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--prefix",
    "--root",
}
APT = re.compile(r"^(apt-get|apt)\s+(?P<verb>\S+)(?P<args>.*)$")
VENV = "{venv}"  # replaced by <final WORKDIR>/.venv once the final WORKDIR is known


class NeedsContainerBackend(ValueError):
    """The Dockerfile uses something only a real container build can do; the message names the line."""


@dataclass
class DockerEnvironment:
    """What a supported Dockerfile amounts to."""

    workdir: str = "/"
    files_dir: Path | None = None  # staged tree copied to ``workdir`` (None: nothing copied)
    setup_commands: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    base_image: str = ""


def _instructions(path: Path) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[int, str, str]] = []
    buf, start = "", 0
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, args = buf.partition(" ")
        out.append((start, word.upper(), args.strip()))
        buf = ""
    if buf:
        word, _, args = buf.partition(" ")
        out.append((start, word.upper(), args.strip()))
    return out


def _env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return {words[0]: args.split(None, 1)[1].strip() if len(words) > 1 else ""}
    return dict(w.split("=", 1) for w in words if "=" in w)


def _host_has_package(name: str) -> bool:
    name = name.split("=", 1)[0]
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True, check=False
    )
    return result.returncode == 0 and "install ok installed" in result.stdout


def _host_lacks(words: list[str]) -> list[str]:
    """The requirements of a ``pip install`` the host's ``python3`` (the one sandboxes run) does not satisfy.

    Only what can be decided without an index: a bare name that is not installed, or a ``name==version`` pin
    whose installed version differs. Other forms (ranges, extras, files, URLs, options) are left to pip at
    setup time, as before.
    """
    pins: dict[str, str] = {}
    for before, word in zip(["", *words], words):
        m = PIN.match(word)
        if word.startswith("-") or before in PIP_VALUE_OPTIONS or m is None:
            continue
        pins[word] = m["version"] or ""
    if not pins:
        return []
    python = (
        "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else shutil.which("python3") or "python3"
    )
    names = [PIN.match(w)["name"] for w in pins]
    probe = (
        "import sys\nfrom importlib.metadata import PackageNotFoundError, version\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n        print(version(name))\n    except PackageNotFoundError:\n        print('-')\n"
    )
    try:
        done = subprocess.run(
            [python, "-c", probe, *names], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError:
        return list(pins)
    found = done.stdout.split() if done.returncode == 0 else []
    if len(found) != len(names):
        return list(pins)

    def release(v: str) -> str:  # PEP 440 pads with zeros: ==6.0.0 matches 6.0
        return re.sub(r"(\.0)+$", "", v)

    return [
        w
        for (w, want), have in zip(pins.items(), found)
        if have == "-" or (want and release(have) != release(want))
    ]


def _translate_step(step: str, where: str) -> list[str]:
    """One ``&&``-separated piece of a RUN line → setup commands (possibly none)."""
    step = step.strip()
    apt = APT.match(step)
    if apt:
        if apt["verb"] in ("update", "clean", "autoremove"):
            return []
        if apt["verb"] == "install":
            pkgs = [w for w in shlex.split(apt["args"]) if not w.startswith("-")]
            missing = [p for p in pkgs if not _host_has_package(p)]
            if missing:
                raise NeedsContainerBackend(
                    f"{where}: apt packages {', '.join(missing)} are not installed on this host; install them "
                    "on the host (the sandbox shares its /usr) or use a container backend"
                )
            return []
        raise NeedsContainerBackend(f"{where}: 'apt-get {apt['verb']}' needs a container backend")
    if re.match(r"^rm\s+-rf\s+/var/lib/apt/lists", step):
        return []
    pip = PIP_INSTALL.match(step)
    if pip:
        words = [
            a for a in shlex.split(pip["args"]) if a not in ("--no-cache-dir", "--user", "-q", "--quiet")
        ]
        lacking = _host_lacks(words)
        if lacking:
            raise NeedsContainerBackend(
                f"{where}: pip requirements {', '.join(lacking)} are not installed on this host, and the task venv "
                "installs offline from the host's packages only; use a container backend (sandbox.task_images)"
            )
        args = " ".join(words)
        return [
            f"{{ [ -x {VENV}/bin/python ] || python3 -m venv --without-pip --system-site-packages {VENV}; }}",
            f"{VENV}/bin/python -m pip install --no-index --disable-pip-version-check {args}",
        ]
    if NETWORK_COMMANDS.search(step):
        raise NeedsContainerBackend(
            f"{where}: {step[:60]!r} needs the network; use a container backend with a prebuilt image"
        )
    return [step]


def _stage(copies: list[tuple[Path, str]], context: Path, workdir: str) -> Path:
    """Copy (source, absolute destination) pairs into one cached tree rooted at ``workdir``."""
    digest = hashlib.sha256(workdir.encode())
    for src, dest in copies:
        digest.update(f"{src.relative_to(context)}->{dest}".encode())
        for p in sorted([src, *src.rglob("*")] if src.is_dir() else [src]):
            if p.is_file():
                digest.update(
                    p.relative_to(context).as_posix().encode()
                    + p.read_bytes()
                    + bytes([p.stat().st_mode & 0o111])
                )
    target = cache_root() / "task-envs" / digest.hexdigest()[:24]
    if target.is_dir():
        return target
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for src, dest in copies:
        rel = PurePosixPath(dest).relative_to(workdir) if dest != workdir else PurePosixPath(".")
        out = tmp / rel
        if src.is_dir():
            shutil.copytree(src, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
    tmp.rename(target)
    return target


def materialise_dockerfile(path: Path, context: Path | None = None) -> DockerEnvironment:
    """Translate the supported subset of ``path`` (build context: ``context``, default its folder).

    Raises:
        NeedsContainerBackend: an unsupported instruction, base image, network step or copy target;
            the message names the file and line.
    """
    context = (context or path.parent).resolve()
    result = DockerEnvironment()
    build_env: dict[str, str] = {}
    workdir = "/"
    copies: list[tuple[int, Path, str]] = []
    runs: list[str] = []
    seen_from = False
    for line_no, word, args in _instructions(path):
        where = f"{path}:{line_no}: {word}"
        if word == "FROM":
            image = args.split()[0] if args else ""
            if seen_from:
                raise NeedsContainerBackend(f"{where}: multi-stage builds need a container backend")
            if not BASE_IMAGE.match(image):
                raise NeedsContainerBackend(
                    f"{where} {image}: only Debian/Python/Ubuntu bases are supported without a container backend"
                )
            seen_from, result.base_image = True, image
        elif word == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / args.strip().strip('"'))
            runs.append(f"mkdir -p {shlex.quote(workdir)}")
        elif word == "ENV":
            result.env.update(_env_pairs(args))
        elif word == "ARG":
            name, _, default = args.partition("=")
            build_env[name.strip()] = default.strip().strip('"')
        elif word in ("COPY", "ADD"):
            words = shlex.split(args)
            flags = [w for w in words if w.startswith("--")]
            if any(f.startswith("--from") for f in flags):
                raise NeedsContainerBackend(f"{where}: COPY --from (multi-stage) needs a container backend")
            if words and words[0].startswith("["):
                words = json.loads(args)
            paths = [w for w in words if not w.startswith("--")]
            if len(paths) < 2:
                raise NeedsContainerBackend(f"{where}: expected SOURCE... DEST")
            *sources, dest = paths
            dest_abs = str(PurePosixPath(workdir) / dest)
            for s in sources:
                if word == "ADD" and (re.match(r"^[a-z]+://", s) or re.search(r"\.(tar|tgz|tar\.\w+)$", s)):
                    raise NeedsContainerBackend(
                        f"{where} {s}: remote or archive sources need a container backend"
                    )
                src = (context / s).resolve()
                if not src.is_relative_to(context) or not src.exists():
                    raise NeedsContainerBackend(
                        f"{where} {s}: source not found inside the build context {context}"
                    )
                into_dir = src.is_file() and (dest.endswith("/") or len(sources) > 1)
                target = str(PurePosixPath(dest_abs) / src.name) if into_dir else dest_abs
                copies.append((line_no, src, target))
        elif word == "RUN":
            if args.startswith("["):
                args = shlex.join(json.loads(args))
            steps = [s for piece in re.split(r"\s*&&\s*", args) for s in _translate_step(piece, where)]
            if steps:
                exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in build_env.items())
                runs.append(f"cd {shlex.quote(workdir)} && {exports}" + " && ".join(steps))
        elif word in IGNORED:
            continue
        else:
            raise NeedsContainerBackend(f"{where}: instruction {word} needs a container backend")
    if not seen_from:
        raise NeedsContainerBackend(f"{path}: no FROM line; a Dockerfile must start from a base image")
    result.workdir = workdir
    for line_no, _, dest in copies:
        if not PurePosixPath(dest).is_relative_to(workdir):
            raise NeedsContainerBackend(
                f"{path}:{line_no}: COPY to {dest} is outside WORKDIR {workdir}; only copies under the workdir "
                "are supported without a container backend"
            )
    if copies:
        result.files_dir = _stage([(s, d) for _, s, d in copies], context, workdir)
    venv = shlex.quote(str(PurePosixPath(workdir) / ".venv"))
    if any(VENV in r for r in runs):
        result.env["PATH"] = f"{venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        result.env.setdefault("VIRTUAL_ENV", venv)
    result.setup_commands = [r.replace(VENV, venv) for r in runs]
    return result
