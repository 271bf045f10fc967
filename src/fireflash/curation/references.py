"""What a task's tests reference (gate 2, RECIPE.md §3): ``referenced_requirements`` reads the test files
(Python by ``ast``, shell by regex) and returns, with file and line, every file path / file name, literal expected
value, command the host lacks, and module or name the tests import that the agent must write; paths the
tests write themselves are marked ``written``. Grader internals and the bundled runner are skipped.
Whether the instruction states them is ``requirements.check_stated``."""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

PATH_LIKE = re.compile(r"^(/?[\w.\-]+(/[\w.\-]+)+/?|[\w\-]+\.[A-Za-z][A-Za-z0-9]{0,4})$")
SHELL_PATH = re.compile(r"(?<![\w$/.\-])(/[\w.\-]+(?:/[\w.\-]+)+)")
INTERNAL_ROOTS = ("/tests", "/logs", "/usr", "/bin", "/sbin", "/dev", "/proc", "/sys", "/solution")
TRIVIAL_NUMBERS = {0, 1, -1}
SKIPPED_FILES = {"junit_runner.py"}
SUBPROCESS_CALLS = {"run", "check_output", "call", "check_call", "Popen"}
WRITE_METHODS = {"write_text", "write_bytes", "mkdir", "touch", "symlink_to", "hardlink_to", "makedirs"}
COPY_CALLS = {"copy", "copy2", "copyfile", "copytree", "move", "symlink", "link"}


@dataclass(frozen=True)
class Requirement:
    """One thing the tests check: a path, a literal expected value, a command or an imported name."""

    kind: str  # 'path', 'literal', 'command' or 'name' (a module or a name imported from it)
    value: str
    where: str  # "tests/test_outputs.py:12"
    written: bool = False  # a path the tests themselves create (a test input), not one they require
    module: str = ""  # for a name: the module the tests import it from


def _internal(path: str) -> bool:
    return any(path == r or path.startswith(r + "/") for r in INTERNAL_ROOTS)


def literals(node: ast.AST) -> list[ast.Constant]:
    """The constants an expected value is made of: ``node`` itself, or the items of a literal tuple, list,
    set or dict."""
    if isinstance(node, ast.Constant):
        return [node]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [c for e in node.elts for c in literals(e)]
    if isinstance(node, ast.Dict):
        return [c for e in [*node.keys, *node.values] if e is not None for c in literals(e)]
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
    # "7/2" or "1/0" (an expression fed to the agent's program) is no path: a path names something
    named = re.search(r"[A-Za-z]", value) is not None
    return Requirement("path", value, where) if PATH_LIKE.match(value) and named and not _internal(value) else None


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


def _path_constants(node: ast.AST, names: dict[str, set[str]]) -> set[str]:
    """Path-like string constants in ``node``, through variables assigned from them (``names``)."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and PATH_LIKE.match(n.value):
            found.add(n.value)
        elif isinstance(n, ast.Name):
            found |= names.get(n.id, set())
    return found


def _written_paths(tree: ast.AST) -> set[str]:
    """Paths the test file itself creates (open(..., 'w'), Path.write_text, mkdir, copy destinations...)."""
    names: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.setdefault(target.id, set()).update(_path_constants(node.value, {}))
    for _ in range(2):  # variables built from variables (OUT = BASE / "x")
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        names[target.id] |= _path_constants(node.value, names)
    written: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", getattr(node.func, "id", ""))
        if name in WRITE_METHODS and isinstance(node.func, ast.Attribute):
            target = node.args[0] if name == "makedirs" and node.args else node.func.value
            written |= _path_constants(target, names)
        elif name in ("mkdir", "makedirs") and node.args:
            written |= _path_constants(node.args[0], names)
        elif name == "open" and node.args:
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax"):
                written |= _path_constants(node.args[0], names)
        elif name in COPY_CALLS and len(node.args) >= 2:
            written |= _path_constants(node.args[1], names)
    return written


def _fed_paths(tree: ast.AST) -> set[str]:
    """Paths inside commands the tests feed to a program ("echo hi > /app/test.txt" sent to the agent's
    terminal): what the tests make happen, not what the agent was to produce."""
    fed = [
        a.value for n in ast.walk(tree) if isinstance(n, ast.Call)
        for a in [*n.args, *(k.value for k in n.keywords)]
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and " " in a.value.strip()
    ]
    return {m[1] for text in fed for m in SHELL_PATH.finditer(text)}


def _unused_paths(tree: ast.AST) -> set[str]:
    """Paths only assigned to a name nothing reads (a constant no check uses)."""
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unused: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id not in loaded for t in node.targets):
            unused |= _path_constants(node.value, {})
    return unused


def _imports(tree: ast.AST, tests_dir: Path, label: str) -> list[Requirement]:
    """Modules the tests import that neither Python nor the tests provide (the agent writes them), and the
    names taken from them."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            mods = [(node.module, [a.name for a in node.names if a.name != "*"])]
        else:
            continue
        for module, names in mods:
            top = module.split(".")[0]
            if _importable(top) or any(tests_dir.rglob(f"{top}.py")) or (tests_dir / top).is_dir():
                continue
            where = f"{label}:{node.lineno}"
            found.append(Requirement("name", module, where, module=module))
            found += [Requirement("name", n, where, module=module) for n in names]
    return found


def _importable(module: str) -> bool:
    if module in sys.stdlib_module_names or module in sys.builtin_module_names:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


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
    written = _written_paths(tree) | _fed_paths(tree) | _unused_paths(tree)
    found: list[Requirement | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "__name__":
            continue  # if __name__ == "__main__"
        if isinstance(node, ast.Compare) and all(
            isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops
        ):
            found += [
                _literal(c, f"{label}:{c.lineno}")
                for side in [node.left, *node.comparators]
                for c in literals(side)
            ]
        elif isinstance(node, ast.Call):
            found.append(_command(node, f"{label}:{node.lineno}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            req = _path(node.value, f"{label}:{node.lineno}")
            found.append(Requirement("path", req.value, req.where, written=True) if req and req.value in written else req)
    found += _imports(tree, path.parent, label)
    return [r for r in found if r is not None]


SHELL_MAKES = re.compile(r"^\s*(?:sudo\s+)?(?:mkdir|touch|tee|ssh-keygen)\b")  # every path named is made
SHELL_COPIES = re.compile(r"^\s*(?:sudo\s+)?(?:cp|mv|ln|install)\b")  # the last path named is made


def _shell_requirements(path: Path, label: str) -> list[Requirement]:
    found, written = [], set()
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        matches = [m for m in SHELL_PATH.finditer(code) if not _internal(m[1])]
        for i, m in enumerate(matches):
            # a path the script itself creates (mkdir, a copy's target, ssh-keygen -f, a redirection) is a test input
            if (
                SHELL_MAKES.match(code)
                or (SHELL_COPIES.match(code) and i == len(matches) - 1)
                or re.search(r">>?\s*~?$", code[: m.start()])
            ):
                written.add(m[1])
            found.append(Requirement("path", m[1], f"{label}:{n}", written=m[1] in written))
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
