"""Every bundled task's image has the programs its solutions and tests run (issue 26: a task runs in its image).

A static check. The programs named by ``solution/*.sh``, ``tests/test.sh``, the shell scripts those write
(a heredoc starting ``#!/bin/bash``) and the tests' ``subprocess`` calls must each be a shell builtin, in
the base image (``BASE_PROGRAMS``: Debian's required set plus Python, as in ``python:3.11-slim-bookworm``
and FireFlash's local ``python:3.11``), or installed by the task's Dockerfile (``apt-get install`` of the
package ``PROGRAM_PACKAGES`` names). A program in neither table fails with the fix. The host's userland
has git, so a task whose Dockerfile forgot it passes on the host and fails only in its image
(``sandbox.task_images = "always"``, or any host without git); this catches that before a run does.
``test_base_programs_are_in_the_local_base`` (marker ``images``) checks the table against the real base.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from fireflash.tasks.families.catalogue import generate
from fireflash.tasks.families.writer import write_task
from fireflash.tasks.loader import DATA_DIR

BASE_PROGRAMS = {
    # bash, dash, coreutils, findutils, grep, sed, mawk, tar, gzip, diffutils (Debian's required set)
    "bash", "sh", "cat", "cp", "mv", "rm", "mkdir", "rmdir", "chmod", "ln", "ls", "head", "tail", "sort", "uniq",
    "wc", "tr", "cut", "paste", "seq", "date", "tee", "touch", "basename", "dirname", "env", "sleep", "realpath",
    "readlink", "stat", "du", "mktemp", "sha256sum", "md5sum", "nl", "tac", "comm", "expr", "find", "xargs",
    "grep", "sed", "awk", "tar", "gzip", "gunzip", "zcat", "diff", "cmp",
    "python3", "python", "pip", "pip3",  # the python:3.x images
}
PROGRAM_PACKAGES = {"git": "git", "curl": "curl", "wget": "wget", "jq": "jq", "zip": "zip", "unzip": "unzip",
                    "tree": "tree", "file": "file", "bc": "bc", "make": "make", "gcc": "gcc", "sqlite3": "sqlite3"}
BUILTINS = {
    "cd", "echo", "printf", "exit", "export", "set", "unset", "local", "read", "return", "shift", "source", ".",
    "test", "[", "true", "false", ":", "eval", "exec", "trap", "wait", "command", "type", "declare", "let",
    "break", "continue", "kill", "mapfile", "readarray", "getopts", "umask", "pushd", "popd",
}
STARTS_COMMAND = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"}
ENDS_COMMAND = {"fi", "done", "}", "esac"}
SKIP_PIECE = {"for", "case", "select", "function"}  # words up to the next separator name no program
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
SUBPROCESS = re.compile(r"subprocess\.(?:run|check_output|check_call|call|Popen)\(\s*\[\s*[\"']([^\"']+)[\"']")
NAME = re.compile(r"^[A-Za-z_][\w.+-]*$")


def _heredocs(text: str) -> tuple[str, list[str]]:
    """``text`` without its heredoc bodies, and the bodies."""
    kept, bodies, lines = [], [], iter(text.splitlines())
    for line in lines:
        kept.append(line)
        for _, end in HEREDOC.findall(line):
            body = []
            for inner in lines:
                if inner.strip() == end:
                    break
                body.append(inner)
            bodies.append("\n".join(body))
    return "\n".join(kept), bodies


def _strip_comments(text: str) -> str:
    """``text`` without shell comments (a ``#`` outside quotes that starts a word), newlines kept, and with
    single-quoted strings emptied (their text is never shell: awk's ``$(NF-1)``, sed scripts)."""
    out, quote, i = [], "", 0
    while i < len(text):
        c = text[i]
        if quote:
            if quote == '"' or c == quote:
                out.append(c)
            if c == "\\" and quote == '"' and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = ""
        elif c == "\\" and i + 1 < len(text):
            out += [c, text[i + 1]]
            i += 1
        elif c in "'\"":
            quote = c
            out.append(c)
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;&|("):
            while i + 1 < len(text) and text[i + 1] != "\n":
                i += 1
        else:
            out.append(c)
        i += 1
    return "".join(out)


def shell_programs(text: str) -> set[str]:
    """Programs a shell script runs: each simple command's first word (builtins, keywords and variables skipped;
    ``$(...)``, ``-exec`` and ``xargs`` commands included; heredoc bodies that are shell scripts included)."""
    text, bodies = _heredocs(text)
    found: set[str] = set()
    for body in bodies:
        if re.match(r"#!\s*/(usr/)?bin/(env\s+)?(ba)?sh\b", body):
            found |= shell_programs(body)
    text = _strip_comments(text.replace("\\\n", " "))
    for inner in re.findall(r"\$\(([^()]*)\)", text):  # command substitutions inside double quotes
        found |= shell_programs(inner)
    lex = shlex.shlex(text, posix=True, punctuation_chars="();|&\n")
    lex.whitespace, lex.commenters = " \t\r", ""
    functions = set(re.findall(r"^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)", text, re.MULTILINE))
    expect, skip, after_dollar, after_xargs = True, False, False, False
    for token in lex:
        if after_dollar:
            after_dollar = False
            if token == "(":  # $( starts a command
                expect, skip = True, False
            elif token.startswith("(("):  # $(( arithmetic: no command until a separator
                skip = True
            continue
        if token == "$":
            after_dollar = True
            continue
        if token and set(token) <= set("();|&\n"):
            expect, skip, after_xargs = True, False, False
            continue
        if skip:
            continue
        if not expect:
            expect = token == "-exec"  # find's -exec names a program
            continue
        if after_xargs and token.startswith("-"):
            continue  # xargs' own options
        if token in STARTS_COMMAND or token in ENDS_COMMAND or ("=" in token and NAME.match(token.split("=")[0])):
            continue  # a keyword or an assignment; the command follows
        if token in SKIP_PIECE:
            skip = True
            continue
        expect = after_xargs = token == "xargs"
        if token in BUILTINS or token in functions or not NAME.match(token):
            continue  # a builtin, a function, a path (the task's own script) or an expansion
        found.add(token)
    return found


def python_programs(text: str) -> set[str]:
    """Programs a Python file runs through ``subprocess`` with a literal argv (paths, the task's own, skipped)."""
    return {p for p in SUBPROCESS.findall(text) if NAME.match(p)}


def task_programs(task_dir: Path) -> dict[str, set[str]]:
    """Program → the files of ``task_dir`` that run it."""
    where: dict[str, set[str]] = {}
    scripts = sorted((task_dir / "solution").glob("*.sh")) + [task_dir / "tests" / "test.sh"]
    for path in scripts:
        for p in shell_programs(path.read_text()):
            where.setdefault(p, set()).add(str(path.relative_to(task_dir)))
    for path in sorted((task_dir / "tests").glob("*.py")):
        for p in python_programs(path.read_text()):
            where.setdefault(p, set()).add(str(path.relative_to(task_dir)))
    return where


def dockerfile_packages(dockerfile: Path) -> set[str]:
    """Debian packages a Dockerfile's ``RUN`` lines ``apt-get install``."""
    text = dockerfile.read_text().replace("\\\n", " ")
    packages: set[str] = set()
    for run in re.findall(r"^RUN\s+(.*)$", text, re.MULTILINE):
        for step in re.split(r"&&|;|\|\|", run):
            words = step.split()
            if len(words) > 2 and words[0] in ("apt-get", "apt") and words[1] == "install":
                packages |= {w.split("=")[0] for w in words[2:] if not w.startswith("-")}
    return packages


def missing_programs(task_dir: Path) -> list[str]:
    """One line per program the task runs that its image would not have (empty: all there)."""
    installed = dockerfile_packages(task_dir / "environment" / "Dockerfile")
    lines = []
    for program, files in sorted(task_programs(task_dir).items()):
        if program in BASE_PROGRAMS:
            continue
        package = PROGRAM_PACKAGES.get(program)
        if package is None:
            lines.append(f"{task_dir.name}: {program} ({', '.join(sorted(files))}) is in neither BASE_PROGRAMS nor "
                         "PROGRAM_PACKAGES; add it to the table that is true")
        elif package not in installed:
            lines.append(f"{task_dir.name}: {', '.join(sorted(files))} run {program}, but environment/Dockerfile does "
                         f"not install it; add `RUN apt-get update && apt-get install -y --no-install-recommends "
                         f"{package} && rm -rf /var/lib/apt/lists/*`")
    return lines


BUNDLED = sorted(p for split in ("train", "heldout") for p in (DATA_DIR / split).iterdir() if p.is_dir())


def test_the_lexer_finds_programs_and_skips_builtins_keywords_and_data():
    script = """#!/bin/bash
# git here is a comment
cd /app/repo && git init -q -b main || exit 1
X=1 jq . f.json | sort -u > out.txt 2>/dev/null
for f in *.txt tree; do wc -l "$f"; done
if [ -n "$(hostname -f)" ]; then echo "curl is data"; fi
find . -name '*.tmp' -exec rm -f {} + ; ls | xargs zip a.zip
awk '{ print $1; system("nope") }' in.txt; awk '{print $(NF-1)}' log  # single quotes are awk's
total=$((total + $(stat -c %s "$f")))
python3 - <<'EOF'
import subprocess  # a Python heredoc: not shell
EOF
cat > /app/run.sh <<'EOF'
#!/bin/bash
unzip -o "$1"
EOF
"""
    assert shell_programs(script) == {"git", "jq", "sort", "wc", "hostname", "find", "rm", "ls", "xargs", "zip",
                                      "awk", "stat", "python3", "cat", "unzip"}
    assert python_programs('subprocess.run(["git", "-C", R]); subprocess.run(["/app/x.sh"]); run([str(p)])') == {"git"}


def test_a_dockerfile_without_git_is_caught_and_the_fix_named(tmp_path):
    task = tmp_path / "t"
    (task / "environment").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "tests").mkdir()
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim-bookworm\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("cd /app && git init -q && sort a > b\n")
    (task / "tests" / "test.sh").write_text("python3 /tests/t.py\n")
    (task / "tests" / "t.py").write_text('subprocess.run(["tree", "/app"])\nsubprocess.run(["frobnicate"])\n')
    lines = missing_programs(task)
    assert len(lines) == 3
    assert "t: solution/solve.sh run git, but environment/Dockerfile does not install it" in lines[1]
    assert "apt-get install -y --no-install-recommends git" in lines[1]
    assert lines[0].startswith("t: frobnicate (tests/t.py) is in neither")
    assert "tests/t.py run tree" in lines[2]
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim-bookworm\nRUN apt-get update \\\n && apt-get install -y git tree=2.1.0-1\n")
    assert [line.split(":")[1].split()[0] for line in missing_programs(task)] == ["frobnicate"]


@pytest.mark.parametrize("task_dir", BUNDLED, ids=lambda p: p.name)
def test_bundled_tasks_images_have_the_programs_they_run(task_dir):
    assert missing_programs(task_dir) == []


def test_generated_families_images_have_the_programs_they_run(tmp_path):
    """One instance of every family (families/writer.py writes their Dockerfiles)."""
    problems = []
    for task_id, spec in generate(1, 0):
        problems += missing_programs(write_task(task_id, spec, tmp_path))
    assert problems == []


def _in_root(root: Path, program: str) -> bool:
    """Whether ``program`` is on the usual PATH of the root filesystem at ``root`` (links resolved inside it)."""
    for directory in ("usr/local/bin", "usr/bin", "bin", "usr/sbin", "sbin"):
        path = root / directory / program
        for _ in range(10):  # absolute links point into the image, not the host
            if not path.is_symlink():
                break
            target = Path(os.readlink(path))
            path = root / target.relative_to("/") if target.is_absolute() else path.parent / target
        if path.is_file():
            return True
    return False


@pytest.mark.images
@pytest.mark.timeout(120)
def test_base_programs_are_in_the_local_base():
    """``BASE_PROGRAMS`` is true of FireFlash's local python:3.11 base (the bundled tasks' FROM, substituted)."""
    from fireflash.sandbox.config import PYTHON_311
    from fireflash.sandbox.containers import ContainerToolMissing, find_tool

    try:
        tool = find_tool("auto")
    except ContainerToolMissing as e:
        pytest.skip(f"no container tool: {e}")
    if tool.kind != "podman" or os.geteuid() != 0 or not tool.exists(PYTHON_311):
        pytest.skip(f"needs podman as root and {PYTHON_311} (built on first use of a python:3.11 task image)")
    root = Path(tool.run("image", "mount", PYTHON_311).strip())
    try:
        assert sorted(p for p in BASE_PROGRAMS if not _in_root(root, p)) == []
        assert not _in_root(root, "git") and not _in_root(root, "jq")  # why the git and json tasks install them
    finally:
        tool.run("image", "unmount", PYTHON_311)
