"""What a task's ``tests/test.sh`` installs at test time, read conservatively (issue 26, network by phase).

    needs = verifier_needs(Path("tasks/t/tests/test.sh"))
    needs.apt, needs.uv_version, needs.pythons, needs.requirements, needs.unstaged

Terminal-Bench-2 verifiers install their tools when they run, with the network (the shapes FireFlash
understands are listed in tasks/README.md):

    apt-get update && apt-get install -y curl
    curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh && source $HOME/.local/bin/env
    uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest /tests/test_outputs.py
    uv venv .venv -p 3.13 && uv pip install pytest==8.4.1 && uv run pytest ...
    pip install pytest==8.4.1 && pytest ...

FireFlash's verifier runs offline, so tasks/verifier_staging.py stages these at build time. This module only
reads: the script is cut into simple commands (``shlex``: quotes, ``&&``, ``||``, ``|``, ``;``, redirections),
``VAR=value`` prefixes, ``sudo`` and shell keywords are dropped, and each command is matched against the
shapes above. Anything else that needs the network (curl or wget of another URL, git clone, npm, cargo, a
requirement given as a URL or path, a variable where a package name should be) is listed in ``unstaged`` with
its line, never guessed at.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from pydantic import BaseModel, Field

DEFAULT_UV_VERSION = "0.9.5"  # staged for an installer URL without a version (astral.sh/uv/install.sh)
UV_INSTALLER = re.compile(r"^https?://astral\.sh/uv/(?:(\d+\.\d+\.\d+)/)?install\.sh$")
_APT_NAME = re.compile(r"^([a-z0-9][a-z0-9+.\-]+)(?::[a-z0-9]+)?(?:=\S+)?$")
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._ -]*\])?(\s*(===|==|~=|!=|>=|<=|<|>)\s*[\w.*+!-]+\s*,?)*$")
_PYTHON = re.compile(r"^(?:python|cpython-?|)(3\.\d+)(?:\.\d+)?$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "time", "exec",
             "command", "nohup"}
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "|&", ";;"}
_NETWORK_TOOLS = {"git": "git clone/fetch", "npm": "npm", "npx": "npx", "yarn": "yarn", "pnpm": "pnpm",
                  "cargo": "cargo", "go": "go get/install", "gem": "gem install", "conda": "conda",
                  "mamba": "mamba", "rustup": "rustup", "nvm": "nvm", "docker": "docker", "snap": "snap"}
# options of uv/uvx/pip that take a value (the value is not a package or the command)
_VALUE_OPTIONS = {"-e", "--editable", "-p", "--python", "-w", "--with", "--from", "--with-editable", "--with-requirements", "-r",
                  "--requirement", "-c", "--constraint", "--constraints", "--index", "--index-url", "-i",
                  "--default-index", "--extra-index-url", "-f", "--find-links", "--cache-dir", "--directory",
                  "--project", "--config-file", "--target", "-t", "--prefix", "--root", "--python-version",
                  "--python-platform", "-o", "--option", "--isolated-python", "--env-file", "--trusted-host",
                  "--timeout", "--retries", "--progress-bar", "--log", "--upgrade-package", "-P", "--group",
                  "--extra", "--only-group", "--index-strategy", "--keyring-provider", "--resolution",
                  "--prerelease", "--link-mode", "--exclude-newer", "--refresh-package", "--color"}


class VerifierNeeds(BaseModel):
    """What one test.sh installs at test time; ``covered`` and ``unstaged`` are what gate 3 reports."""

    schema_version: int = 1
    script: str = Field("", description="The script read (task-relative path).")
    apt: list[str] = Field(default_factory=list, description="Debian packages apt-get/apt installs.")
    uv_version: str | None = Field(None, description="The uv its installer URL names (DEFAULT_UV_VERSION without one).")
    pythons: list[str] = Field(default_factory=list, description="Python versions uv is asked for ('3.13').")
    requirements: list[list[str]] = Field(
        default_factory=list,
        description="pip/uv requirements (PEP 508, pinned or not), one list per command: each is resolved on its own, "
        "as that command resolves it at test time.")
    covered: list[str] = Field(default_factory=list, description="Network steps staging covers, with their lines.")
    unstaged: list[str] = Field(default_factory=list, description="Network steps not understood: line, step, why.")

    @property
    def needs_staging(self) -> bool:
        """True when the script installs anything at test time (it would fail offline without staging)."""
        return bool(self.apt or self.uv_version or self.pythons or self.requirements or self.unstaged)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(1-based first line, text) of each logical line: backslash-newline continuations joined."""
    out, start, parts = [], 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if not parts:
            start = number
        if line.endswith("\\") and not line.endswith("\\\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        out.append((start, " ".join(parts)))
        parts = []
    if parts:
        out.append((start, " ".join(parts)))
    return out


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of one logical line as word lists: separators split, redirections dropped,
    leading assignments, ``sudo`` / ``env`` and shell keywords removed. Unbalanced quotes give []."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    commands, words, skip_next = [], [], False
    for token in tokens:
        if skip_next:
            skip_next = False
            continue
        if token in _SEPARATORS:
            commands.append(words)
            words = []
        elif token and set(token) <= set("<>&") and token not in ("&",):
            skip_next = True  # a redirection: its target is not a word of the command
            if words and words[-1].isdigit():
                words.pop()  # the fd before it (2>&1)
        else:
            words.append(token)
    commands.append(words)
    return [_strip_prefixes(w) for w in commands if _strip_prefixes(w)]


def _strip_prefixes(words: list[str]) -> list[str]:
    while words:
        head = words[0]
        if head in _KEYWORDS or _ASSIGNMENT.match(head):
            words = words[1:]
        elif head in ("sudo", "env"):
            words = words[1:]
            while words and (words[0].startswith("-") or _ASSIGNMENT.match(words[0])):
                words = words[1:]
        elif head == "timeout" and len(words) > 1:
            words = words[2:]
        else:
            break
    return words


def _split_options(words: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Options (``--opt value``, ``--opt=value``, ``-p3.13``) and the positional words, up to and including
    the first positional word of a command that takes one (callers cut the rest)."""
    options: dict[str, list[str]] = {}
    positional: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            positional += words[i + 1:]
            break
        if word.startswith("--") and "=" in word:
            name, _, value = word.partition("=")
            options.setdefault(name, []).append(value)
        elif word in _VALUE_OPTIONS and i + 1 < len(words):
            options.setdefault(word, []).append(words[i + 1])
            i += 1
        elif re.match(r"^-[pwr]\S", word):  # -p3.13, -wpytest
            options.setdefault(word[:2], []).append(word[2:])
        elif word.startswith("-"):
            options.setdefault(word, [])
        else:
            positional.append(word)
        i += 1
    return options, positional


class _Reader:
    def __init__(self, tests_dir: Path | None, script: str) -> None:
        self.needs = VerifierNeeds(script=script)
        self.tests_dir = tests_dir
        self.group: list[str] = []  # the requirements of the command being read

    def unstaged(self, number: int, words: list[str], why: str) -> None:
        self.needs.unstaged.append(f"line {number}: `{shlex.join(words)[:120]}`: {why}")

    def covered(self, number: int, what: str) -> None:
        self.needs.covered.append(f"{what} (line {number})")

    def python(self, number: int, words: list[str], value: str) -> None:
        m = _PYTHON.match(value)
        if m is None:
            self.unstaged(number, words, f"Python {value!r} is not a version FireFlash can stage (e.g. 3.13)")
        elif m[1] not in self.needs.pythons:
            self.needs.pythons.append(m[1])

    def requirement(self, number: int, words: list[str], spec: str) -> None:
        spec = spec.strip()
        if "@" in spec and "://" not in spec and not spec.startswith("@"):
            name, _, version = spec.partition("@")  # uvx pytest@8.4.1
            spec = f"{name}=={version}" if version and version != "latest" else name
        if not _REQUIREMENT.match(spec):
            self.unstaged(number, words, f"requirement {spec!r} is a URL, path or variable, not a name==version")
        elif spec not in self.group:
            self.group.append(spec)

    def requirements_file(self, number: int, words: list[str], path: str) -> None:
        local = self.tests_dir / path.removeprefix("/tests/") if self.tests_dir and path.startswith("/tests/") else None
        if local is None or not local.is_file():
            self.unstaged(number, words, f"requirements file {path} is not in the task's tests/ directory")
            return
        for line in local.read_text(errors="replace").splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                self.requirement(number, words, line.split(";", 1)[0])

    def apt(self, number: int, words: list[str]) -> None:
        _, positional = _split_options(words[1:])
        if not positional:
            return
        sub, packages = positional[0], positional[1:]
        if sub == "update":
            self.covered(number, f"{words[0]} update (no sources offline: succeeds)")
        elif sub == "install":
            names = []
            for word in packages:
                m = _APT_NAME.match(word)
                if m is None:
                    self.unstaged(number, words, f"{word!r} is not a Debian package name")
                else:
                    names.append(m[1])
                    if m[1] not in self.needs.apt:
                        self.needs.apt.append(m[1])
            if names:
                self.covered(number, f"{words[0]} install {' '.join(names)} (staged in the image)")

    def fetch(self, number: int, words: list[str]) -> None:
        urls = [w for w in words[1:] if re.match(r"^https?://", w)]
        for url in urls:
            m = UV_INSTALLER.match(url)
            if m is None:
                self.unstaged(number, words, f"downloads {url}")
                continue
            self.needs.uv_version = self.needs.uv_version or m[1] or DEFAULT_UV_VERSION
            note = "" if m[1] else f"; no version in the URL, uv {DEFAULT_UV_VERSION} staged"
            self.covered(number, f"uv installer {url} (uv {self.needs.uv_version} staged{note})")

    def uv_tool_run(self, number: int, words: list[str], args: list[str]) -> None:
        options, positional = _split_options(args)
        for value in options.get("-p", []) + options.get("--python", []):
            self.python(number, words, value)
        for value in options.get("-w", []) + options.get("--with", []):
            for spec in value.split(","):
                self.requirement(number, words, spec)
        for path in options.get("--with-requirements", []):
            self.requirements_file(number, words, path)
        if options.get("--from"):
            self.requirement(number, words, options["--from"][0])
        elif positional:
            self.requirement(number, words, positional[0])
        self.covered(number, "uvx " + (positional[0] if positional else "") + " (offline, from the staged wheelhouse)")

    def pip_install(self, number: int, words: list[str], args: list[str]) -> None:
        options, positional = _split_options(args)
        for path in options.get("-r", []) + options.get("--requirement", []):
            self.requirements_file(number, words, path)
        if "-e" in options or "--editable" in options:
            self.unstaged(number, words, "an editable install needs a local project")
        for spec in positional:
            self.requirement(number, words, spec)
        self.covered(number, "pip install (offline, from the staged wheelhouse)")

    def uv(self, number: int, words: list[str]) -> None:
        args = words[1:]
        sub = next((w for w in args if not w.startswith("-")), "")
        rest = args[args.index(sub) + 1:] if sub else []
        if sub == "venv" or sub == "python" and rest[:1] in (["install"], ["find"], ["pin"]):
            options, positional = _split_options(rest[1:] if sub == "python" else rest)
            for value in options.get("-p", []) + options.get("--python", []):
                self.python(number, words, value)
            if sub == "python":
                for value in positional:
                    self.python(number, words, value)
            self.covered(number, f"uv {sub} (the image's Python; no download)")
        elif sub == "pip" and rest[:1] == ["install"]:
            self.pip_install(number, words, rest[1:])
        elif sub == "tool" and rest[:1] in (["run"], ["install"]):
            self.uv_tool_run(number, words, rest[1:])
        elif sub == "run":
            options, _ = _split_options(rest)
            for value in options.get("-p", []) + options.get("--python", []):
                self.python(number, words, value)
            for value in options.get("-w", []) + options.get("--with", []):
                for spec in value.split(","):
                    self.requirement(number, words, spec)
            self.covered(number, "uv run (offline)")
        elif sub in ("add", "sync", "lock", "self", "publish", "build"):
            self.unstaged(number, words, f"`uv {sub}` resolves or fetches a project: not staged")

    def command(self, number: int, words: list[str]) -> None:
        head = words[0].rsplit("/", 1)[-1]
        if head in ("apt-get", "apt"):
            self.apt(number, words)
        elif head in ("curl", "wget"):
            self.fetch(number, words)
        elif head == "uvx":
            self.uv_tool_run(number, words, words[1:])
        elif head == "uv":
            self.uv(number, words)
        elif re.match(r"^pip3?(\.\d+)?$", head) and words[1:2] == ["install"]:
            self.pip_install(number, words, words[2:])
        elif re.match(r"^python3?(\.\d+)?$", head) and words[1:4] == ["-m", "pip", "install"]:
            self.pip_install(number, words, words[4:])
        elif head in _NETWORK_TOOLS and not (head == "git" and words[1:2] not in (["clone"], ["fetch"], ["pull"])):
            self.unstaged(number, words, f"{_NETWORK_TOOLS[head]} needs the network at test time")


def verifier_needs(script: Path, tests_dir: Path | None = None) -> VerifierNeeds:
    """Read ``script`` (a task's tests/test.sh) for what it installs at test time.

    Args:
        tests_dir: the task's tests directory, where ``-r /tests/requirements.txt`` files are read from
            (default: the script's directory).

    Returns:
        ``VerifierNeeds``; empty (``needs_staging`` False) when the script installs nothing or is missing.
    """
    if not script.is_file():
        return VerifierNeeds()
    reader = _Reader(tests_dir or script.parent, script.name)
    text = script.read_text(errors="replace")
    for number, line in logical_lines(text):
        for words in simple_commands(line):
            reader.group = []
            reader.command(number, words)
            if reader.group and reader.group not in reader.needs.requirements:
                reader.needs.requirements.append(reader.group)
    needs = reader.needs
    errexit = re.search(r"^\s*set\s+-[a-z]*e|^\s*set\s+-o\s+errexit|^#!.*\s-[a-z]*e\b", text, re.MULTILINE)
    pipefail = re.search(r"pipefail", text)
    if needs.uv_version and errexit and pipefail:
        needs.unstaged.append("the uv installer's `curl | sh` fails offline, and `set -e` with pipefail stops the "
                              "script there (staged uv is reached through $HOME/.local/bin/env only after it)")
    return needs
