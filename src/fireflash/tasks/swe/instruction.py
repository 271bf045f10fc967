"""The instruction of a generated SWE task, written from what a user would report (issue 30, deliverable 3).

From each failing test's short traceback it keeps the test's own statement (the call and the expected
value) and the error line (the actual value), and names the public function the statement calls. It never
shows a frame outside the test file, the mutated file, its line or the fix: the agent gets the symptom, as
in a bug report, and finds the cause itself.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

FRAME = re.compile(r"^(?P<path>[^\s:][^:]*\.py):(?P<line>\d+): in (?P<func>\S+)$")
NOT_PUBLIC = {"list", "len", "set", "sorted", "dict", "tuple", "str", "int", "float", "bool", "isinstance", "raises",
              "type", "repr", "iter", "next", "range", "map", "filter", "zip", "frozenset", "getattr", "hasattr",
              "callable", "all", "any", "sum", "min", "max", "warns", "approx", "bytes", "print", "reversed", "enumerate"}
MAX_SHOWN_TESTS = 3
MAX_ERROR_LINES = 6
MAX_LINE_CHARS = 240


@dataclass(frozen=True)
class Failure:
    """What a failing test shows a user: its node id, its statement(s) that failed, the error lines."""

    nodeid: str
    statement: str
    error: list[str]


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
            if name and name not in NOT_PUBLIC and not name.startswith("_") and name not in names:
                names.append(name)
    return names


def _dedent(text: str) -> str:
    lines = text.splitlines()
    # a multi-line statement cut from a frame may start with `assert (` and continue indented
    return "\n".join(line.strip() for line in lines) if len(lines) > 1 else text.strip()


def public_function(failures: list[Failure], mutated_function: str) -> str | None:
    """The public name the report is about: the mutated function when a failing statement calls it by
    name, else the first non-builtin call of the first failing statement, else None."""
    short = mutated_function.rsplit(".", 1)[-1]
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
        lines += ["", f"## `{f.nodeid}`", "", "This statement of the test:", "", "```python", f.statement, "```"]
        if f.error:
            lines += ["", "fails with:", "", "```", *f.error, "```"]
    rest = [f.nodeid for f in failures if f not in shown]
    if rest:
        lines += ["", "Also failing: " + ", ".join(f"`{n}`" for n in rest[:10]) + (" and more." if len(rest) > 10 else ".")]
    return "\n".join(lines) + "\n"
