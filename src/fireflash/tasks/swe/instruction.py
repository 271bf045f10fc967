"""The instruction of a generated SWE task, written from what a user would report (issue 30, deliverable 3).

From each failing test's short traceback it keeps the test's own statement (the call and the expected
value) and the error line (the actual value), and names the public function the statement calls. It never
shows a frame outside the test file, the mutated file, its line or the fix: the agent gets the symptom, as
in a bug report, and finds the cause itself.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

FRAME = re.compile(r"^(?P<path>[^\s:][^:]*\.py):(?P<line>\d+): in (?P<func>\S+)$")
# builtins and test helpers are never the subject of a report (the package's function is)
NOT_PUBLIC = set(dir(builtins)) | {"raises", "warns", "approx", "fail", "skip", "skipTest", "subTest"}
ADDRESS = re.compile(r"at 0x[0-9a-f]+")  # object addresses differ run to run: noise in a report
MAX_SHOWN_TESTS = 3
MAX_TEST_LINES = 30
MAX_ERROR_LINES = 6
MAX_LINE_CHARS = 240


@dataclass(frozen=True)
class Failure:
    """What a failing test shows a user: its node id, its statement(s) that failed, the error lines."""

    nodeid: str
    statement: str
    error: list[str]
    test_source: str = ""  # the test function's source when short (a reproduction), else ""


def parse_failure(nodeid: str, text: str, hidden_paths: list[str]) -> Failure:
    """The test's last statement in its own file and the ``E`` lines of a ``--tb=short`` report.

    Lines that name ``hidden_paths`` (the mutated file) or a package frame are left out.
    """
    test_file = nodeid.split("::", 1)[0]
    statement: list[str] = []
    current: list[str] | None = None
    errors: list[str] = []
    for line in text.splitlines():
        frame = FRAME.match(line)
        if frame:
            current = [] if frame.group("path").endswith(test_file) or test_file.endswith(frame.group("path")) else None
            if current is not None:
                statement = current
            continue
        if line.startswith("E "):
            errors.append(line[2:].strip())
        elif current is not None and line.startswith("    "):
            current.append(line[4:])
    errors = [e for e in errors if e and not any(h in e for h in hidden_paths) and ".py:" not in e
              and 'File "' not in e]
    errors = [ADDRESS.sub("at 0x...", e) for e in errors]
    errors = [e[:MAX_LINE_CHARS] + (" ..." if len(e) > MAX_LINE_CHARS else "") for e in errors[:MAX_ERROR_LINES]]
    return Failure(nodeid, "\n".join(s.rstrip() for s in statement).strip("\n"), errors)


def called_names(statement: str) -> list[str]:
    """Names called in ``statement`` that are not builtins or test helpers, in order (``inflection.pluralize``
    gives ``pluralize``)."""
    try:
        tree = ast.parse(_dedent(statement))
    except SyntaxError:
        return re.findall(r"\b([A-Za-z_]\w*)\(", statement)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name and name not in NOT_PUBLIC and not name.startswith(("_", "assert")) and name not in names:
                names.append(name)
    return names


def _dedent(text: str) -> str:
    lines = text.splitlines()
    # a multi-line statement cut from a frame may start with `assert (` and continue indented
    return "\n".join(line.strip() for line in lines) if len(lines) > 1 else text.strip()


def function_source(test_file_text: str, nodeid: str) -> str:
    """The source of the test function ``nodeid`` names (decorators included) when it has at most
    ``MAX_TEST_LINES`` lines, else ""."""
    parts = nodeid.split("::")[1:]
    if not parts:
        return ""
    parts[-1] = parts[-1].split("[", 1)[0]
    try:
        tree = ast.parse(test_file_text)
    except (SyntaxError, ValueError):
        return ""
    body, node = tree.body, None
    for name in parts:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return ""
        body = node.body
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return ""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = test_file_text.splitlines()[first - 1 : node.end_lineno]
    if len(lines) > MAX_TEST_LINES:
        return ""
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines)


def package_names(test_file_text: str, tops: set[str]) -> tuple[set[str], set[str]]:
    """(names imported from the package, aliases of its modules) in a test file; ``tops``: its top modules."""
    names: set[str] = set()
    modules: set[str] = set()
    try:
        tree = ast.parse(test_file_text)
    except (SyntaxError, ValueError):
        return names, modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in tops:
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in tops}
    return names, modules


def package_calls(code: str, names: set[str], modules: set[str]) -> list[str]:
    """The package's functions ``code`` calls (``pluralize`` for ``inflection.pluralize(x)``), in order."""
    try:
        tree = ast.parse(_dedent(code) if "\n" in code and not code.startswith(("def ", "@", "async ")) else code)
    except SyntaxError:
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in names:
            name = f.id
        elif isinstance(f, ast.Attribute) and (f.attr in names or _base(f.value) in modules | names):
            name = f.attr
        else:
            continue
        if not name.startswith("_") and name not in found:
            found.append(name)
    return found


def _base(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def public_function(failures: list[Failure], mutated_function: str, names: set[str] = frozenset(),
                    modules: set[str] = frozenset()) -> str | None:
    """The public name the report is about: a package function the failing statements call (the mutated one
    when it is among them), else one the failing tests call, else the first non-builtin call of a failing
    statement, else None. ``names``/``modules``: what the test files import from the package."""
    short = mutated_function.rsplit(".", 1)[-1]
    for code in ([f.statement for f in failures], [f.test_source for f in failures]):
        calls = [n for c in code if c for n in package_calls(c, set(names), set(modules))]
        if short in calls and not short.startswith("_"):
            return short
        if calls:
            return calls[0]
    calls = [n for f in failures for n in called_names(f.statement)]
    if short in calls and not short.startswith("_"):
        return short
    return calls[0] if calls else None


def write_instruction(package: str, version: str, failures: list[Failure], function: str | None) -> str:
    """The instruction: the package and where it is, what fails (statement, error), what must keep working.

    Raises:
        ValueError: no failure has a statement to show (the caller drops the mutation: nothing a user
            could report).
    """
    shown = [f for f in failures if f.statement][:MAX_SHOWN_TESTS]
    if not shown:
        raise ValueError("no failing test has a statement in its own file to show")
    subject = f"`{function}`" if function else "the package"
    count = len(failures)
    lines = [
        f"# {package} {version}: {subject} misbehaves",
        "",
        (f"The source of {package} {version} is in `/app` (importable as installed). A recent change broke "
         f"{subject}: {count} check{'s' if count != 1 else ''} of the package's own test suite now "
         f"fail{'s' if count == 1 else ''}. Find the cause in the package source and fix it, so that the checks "
         "below pass again and every other behaviour the package's tests rely on stays as it is."),
        "",
        ("The tests are not in `/app`: they are run on your changes when you finish. Reproduce each failure "
         "with the statement shown (in Python, importing from the package as the test does)."),
    ]
    for f in shown:
        lines += ["", f"## `{f.nodeid}`", ""]
        if f.test_source:
            lines += ["The test:", "", "```python", f.test_source, "```", "", "fails at this statement:", ""]
        else:
            lines += ["This statement of the test:", ""]
        lines += ["```python", f.statement, "```"]
        if f.error:
            lines += ["", "with:", "", "```", *f.error, "```"]
    rest = [f.nodeid for f in failures if f not in shown]
    if rest:
        lines += ["", "Also failing: " + ", ".join(f"`{n}`" for n in rest[:10]) + (" and more." if len(rest) > 10 else ".")]
    return "\n".join(lines) + "\n"
