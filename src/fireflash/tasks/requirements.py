"""What a task's tests check, and whether the instruction states it (gate 2, RECIPE.md §3).

A grader may only check what the agent was told. From the test files this extracts, with file and
line, every file path / file name, every literal expected value (a string or number an ``==``, ``!=``,
``in`` or ``not in`` comparison tests against) and every command the tests run that the host does not
provide; each must appear in the instruction. Grader internals (``/tests``, ``/logs``, system paths)
and the bundled runner are not requirements.
"""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

PATH_LIKE = re.compile(r"^(/?[\w.\-]+(/[\w.\-]+)+/?|[\w\-]+\.[A-Za-z][A-Za-z0-9]{0,4})$")
SHELL_PATH = re.compile(r"(?<![\w$/.\-])(/[\w.\-]+(?:/[\w.\-]+)+)")
INTERNAL_ROOTS = ("/tests", "/logs", "/usr", "/bin", "/sbin", "/dev", "/proc", "/sys", "/solution")
TRIVIAL_NUMBERS = {0, 1, -1}
SKIPPED_FILES = {"junit_runner.py"}
SUBPROCESS_CALLS = {"run", "check_output", "call", "check_call", "Popen"}


@dataclass(frozen=True)
class Requirement:
    kind: str  # 'path', 'literal' or 'command'
    value: str
    where: str  # "tests/test_outputs.py:12"


def _internal(path: str) -> bool:
    return any(path == r or path.startswith(r + "/") for r in INTERNAL_ROOTS)


def _literals(node: ast.AST) -> list[ast.Constant]:
    if isinstance(node, ast.Constant):
        return [node]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [c for e in node.elts for c in _literals(e)]
    if isinstance(node, ast.Dict):
        return [c for e in [*node.keys, *node.values] if e is not None for c in _literals(e)]
    return []


def _literal(c: ast.Constant, where: str) -> Requirement | None:
    """A compared constant that is an expected value (not a path, not trivially 0/1/-1)."""
    value = c.value
    if (
        isinstance(value, str)
        and not PATH_LIKE.match(value)
        and len(value.strip()) >= 2
        and re.search(r"\w", value)
    ):
        return Requirement("literal", value, where)
    if isinstance(value, int | float) and not isinstance(value, bool) and value not in TRIVIAL_NUMBERS:
        return Requirement("literal", repr(value), where)
    return None


def _path(value: str, where: str) -> Requirement | None:
    return Requirement("path", value, where) if PATH_LIKE.match(value) and not _internal(value) else None


def _command(node: ast.Call, where: str) -> Requirement | None:
    """argv[0] of a subprocess call when the host does not provide it (so the agent must)."""
    if getattr(node.func, "attr", getattr(node.func, "id", "")) not in SUBPROCESS_CALLS or not node.args:
        return None
    first = node.args[0]
    argv0 = first.elts[0] if isinstance(first, ast.List | ast.Tuple) and first.elts else first
    if not (isinstance(argv0, ast.Constant) and isinstance(argv0.value, str) and argv0.value.split()):
        return None
    command = argv0.value.split()[0]
    return (
        Requirement("command", command, where)
        if "/" not in command and shutil.which(command) is None
        else None
    )


def _python_requirements(path: Path, label: str) -> list[Requirement]:
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError) as e:
        return [Requirement("literal", f"<unparsable test file: {e}>", label)]
    documented = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, documented)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    found: list[Requirement | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(
            isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops
        ):
            found += [
                _literal(c, f"{label}:{c.lineno}")
                for side in [node.left, *node.comparators]
                for c in _literals(side)
            ]
        elif isinstance(node, ast.Call):
            found.append(_command(node, f"{label}:{node.lineno}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append(_path(node.value, f"{label}:{node.lineno}"))
    return [r for r in found if r is not None]


def _shell_requirements(path: Path, label: str) -> list[Requirement]:
    found = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        for m in SHELL_PATH.finditer(code):
            if not _internal(m[1]):
                found.append(Requirement("path", m[1], f"{label}:{n}"))
    return found


def referenced_requirements(tests_dir: Path) -> list[Requirement]:
    """Every path, literal and command the test files under ``tests_dir`` check, with file:line."""
    found: list[Requirement] = []
    for path in sorted(tests_dir.rglob("*")):
        if not path.is_file() or path.name in SKIPPED_FILES or "__pycache__" in path.parts:
            continue
        label = path.relative_to(tests_dir.parent).as_posix()
        if path.suffix == ".py":
            found += _python_requirements(path, label)
        elif path.suffix == ".sh" or path.read_bytes()[:2] == b"#!":
            found += _shell_requirements(path, label)
    return found


def is_stated(req: Requirement, instruction: str, workdir: str) -> bool:
    """Whether the instruction states ``req`` (a path may be stated in full, relative to the workdir, or by name)."""
    if req.kind == "path":
        p = PurePosixPath(req.value.rstrip("/"))
        forms = {req.value, req.value.rstrip("/"), p.name}
        if p.is_absolute() and p.is_relative_to(workdir) and p != PurePosixPath(workdir):
            forms.add(str(p.relative_to(workdir)))
        return any(f and f in instruction for f in forms)
    if req.kind == "literal" and re.fullmatch(r"-?\d+(\.\d+)?", req.value):
        return re.search(rf"(?<![\w.]){re.escape(req.value)}(?![\w]|\.\d)", instruction) is not None
    lines = [ln.strip() for ln in req.value.splitlines() if ln.strip()]
    return all(ln in instruction for ln in lines)


def unstated_requirements(tests_dir: Path | None, instruction: str, workdir: str) -> list[Requirement]:
    """The requirements the tests check that the instruction never states (gate 2 fails on any)."""
    if tests_dir is None or not tests_dir.is_dir():
        return []
    seen: set[tuple[str, str]] = set()
    missing = []
    for req in referenced_requirements(tests_dir):
        if (req.kind, req.value) not in seen and not is_stated(req, instruction, workdir):
            missing.append(req)
        seen.add((req.kind, req.value))
    return missing
