"""What a task's tests check, and whether the instruction states it (gate 2, RECIPE.md §3).

A grader may only check what the agent was told. From the test files this extracts, with file and
line, every file path / file name, every literal expected value (a string or number an ``==``, ``!=``,
``in`` or ``not in`` comparison tests against), every command the tests run that the host does not
provide, and every module (and name from it) the tests import that the agent must write. Grader
internals (``/tests``, ``/logs``, system paths) and the bundled runner are not requirements.

Not everything the tests mention is something the agent must be told (issue 26: real tasks failed gate 2
on their inputs). ``check_stated`` sorts what the instruction does not state into
    missing  paths, names and formats only the tests know: a file the tests read that nothing gives
             (``count.txt``), a module or function they import, a command they run, a string whose words
             appear nowhere in the instruction or the task's inputs ("TOTAL: 3" when only the count was asked);
    notes    what the agent cannot or need not be told: test inputs (paths the tests write, anything under
             /tmp, files the environment or tests/ ship), expected values computed from the instruction's
             rules (numbers; strings made only of words from the instruction or the inputs), and, when the
             instruction asks to find / recover / crack a hidden thing (a password, key, flag, lost file...),
             the value to be found.
Gate 2 fails on ``missing`` only and reports the notes. The extraction is ``references``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from fireflash.curation.references import SKIPPED_FILES, Requirement, literals, referenced_requirements
from fireflash.protocols import Task

# "find the password", "recover the lost commit", "crack the PIN": the value checked is one the task hides
FIND_WORDS = re.compile(
    r"\b(?:find|recover|retrieve|discover|crack|decrypt|decode|locate|figure out|reverse[- ]engineer|brute[- ]force)"
    r"\b[^.\n]{0,120}?\b(?:password|passphrase|secret|key|flag|token|pin|hash|hidden|lost|missing|answer|code)s?\b"
    r"|\b(?:password|passphrase|secret|key|flag|token|pin|hash|answer|code)s?\b[^.\n]{0,120}?\b(?:is|are|was|were) "
    r"(?:hidden|lost|missing|encrypted|encoded)\b",
    re.IGNORECASE,
)
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]+")
MAX_INPUT_BYTES = 1 << 20  # per given file read for its words


@dataclass
class Stated:
    """Gate 2's sorting of what the instruction does not state (module docstring)."""

    missing: list[Requirement] = field(default_factory=list)  # gate 2 fails on any
    notes: list[tuple[Requirement, str]] = field(default_factory=list)  # (requirement, why it is not one)


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
    if req.kind == "name":  # a module may be stated as its file (app/stats.py) or by its last part
        return any(f in instruction for f in (req.value, req.value.replace(".", "/"), req.value.rsplit(".", 1)[-1]))
    lines = [ln.strip() for ln in req.value.splitlines() if ln.strip()]
    return all(ln in instruction for ln in lines)


def _given(tests_dir: Path, given_dirs: Iterable[Path]) -> tuple[set[str], set[str]]:
    """(file names, lower-case words) of what the task gives: its environment files and the tests' data
    files, and the string constants of the test files that no comparison checks (the inputs they feed)."""
    names: set[str] = set()
    words: set[str] = set()
    for root in [*given_dirs, tests_dir]:
        if not root.is_dir():
            continue
        for path in root.rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            names |= {path.name, *(p.name for p in path.relative_to(root).parents if p.name)}
            if path.suffix == ".py" and root == tests_dir:
                try:
                    tree = ast.parse(path.read_bytes())
                except (SyntaxError, ValueError):
                    continue
                compared = {  # checked values and bare string statements (docstrings) are not inputs
                    id(c) for n in ast.walk(tree) if isinstance(n, ast.Compare)
                    for side in [n.left, *n.comparators] for c in literals(side)
                } | {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
                for n in ast.walk(tree):
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in compared:
                        words |= {w.lower() for w in WORD.findall(n.value)}
            elif path.name not in SKIPPED_FILES and path.stat().st_size <= MAX_INPUT_BYTES:
                words |= {w.lower() for w in WORD.findall(path.read_bytes().decode("utf-8", "replace"))}
    return names, words


def _why_not_required(req: Requirement, instruction: str, names: set[str], words: set[str]) -> str | None:
    """Why an unstated ``req`` is no requirement the instruction owed the agent (a note), or None (it is)."""
    if req.kind == "path":
        if req.written:
            return "a test input (the tests create it)"
        if req.value == "/tmp" or req.value.startswith("/tmp/"):
            return "a test input or scratch file under /tmp"
        if PurePosixPath(req.value.rstrip("/")).name in names:
            return "a file the task's environment or tests/ ship (an input)"
        return None
    if req.kind == "name":
        top = req.module.split(".")[0]
        if top in names or f"{top}.py" in names:
            return f"module {req.module} is code the task's environment ships (the agent edits it)"
        return None
    if req.kind != "literal":
        return None  # a command the tests run is a name the agent must be told
    if FIND_WORDS.search(instruction):
        return "the instruction asks to find it (a value the task hides)"
    if re.fullmatch(r"-?\d+(\.\d+)?(e-?\d+)?", req.value):
        return "an expected value computed from the instruction's rules (a number)"
    unknown = {w.lower() for w in WORD.findall(req.value)} - words - {w.lower() for w in WORD.findall(instruction)}
    if not unknown:
        return "an expected value made of the instruction's and the inputs' words (computed)"
    return None


def test_spans(tests_dir: Path, node_ids: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
    """Lines, by file label (``tests/test_x.py``), of the test functions ``node_ids`` name, decorators included.

    A node id is pytest's (``tests/test_x.py::TestY::test_z[param]``, its file relative to wherever the tests
    ran); it names a file under ``tests_dir`` whose path relative to ``tests_dir`` ends the id's file path or
    is ended by it. An id that names no function found is left out (gate 2 then has nothing of it to check;
    gate 1 finds a test that does not exist).
    """
    wanted: dict[str, set[tuple[str, ...]]] = {}
    for node_id in node_ids:
        file, *names = node_id.split("::")
        if names:
            wanted.setdefault(file, set()).add(tuple(n.split("[", 1)[0] for n in names))
    spans: dict[str, list[tuple[int, int]]] = {}
    for path in sorted(tests_dir.rglob("*.py")):
        rel = path.relative_to(tests_dir).as_posix()
        chains = set().union(*(c for f, c in wanted.items() if rel.endswith(f) or f.endswith(rel)))
        if not chains:
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        label = path.relative_to(tests_dir.parent).as_posix()
        for chain, node in _defs(tree, ()):
            if chain in chains or chain[-1:] in chains:
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                spans.setdefault(label, []).append((start, node.end_lineno or node.lineno))
    return spans


def _defs(tree: ast.AST, outer: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], ast.AST]]:
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield (*outer, node.name), node
        elif isinstance(node, ast.ClassDef):
            yield from _defs(node, (*outer, node.name))


def _within(req: Requirement, spans: dict[str, list[tuple[int, int]]]) -> bool:
    label, _, line = req.where.rpartition(":")
    return line.isdigit() and any(a <= int(line) <= b for a, b in spans.get(label, []))


def check_stated(
    tests_dir: Path | None,
    instruction: str,
    workdir: str,
    given_dirs: Sequence[Path] = (),
    only_tests: Sequence[str] | None = None,
) -> Stated:
    """Sort what the tests under ``tests_dir`` check and ``instruction`` does not state into missing
    requirements (gate 2 fails on them) and notes (module docstring).

    Args:
        given_dirs: directories whose files the agent is given (the task's ``environment/``): their names and
            words are inputs, not requirements.
        only_tests: node ids of the tests whose requirements count (an SWE task's FAIL_TO_PASS): the other
            tests already pass on the code the agent is given (PASS_TO_PASS), so what they check needs no
            stating (issue 30: the literals of a package's passing tests failed most generated tasks).
    """
    stated = Stated()
    if tests_dir is None or not tests_dir.is_dir():
        return stated
    names, words = _given(tests_dir, given_dirs)
    spans = test_spans(tests_dir, only_tests) if only_tests is not None else None
    seen: set[tuple[str, str]] = set()
    for req in referenced_requirements(tests_dir):
        if spans is not None and not _within(req, spans):
            continue
        if (req.kind, req.value) not in seen and not is_stated(req, instruction, workdir):
            why = _why_not_required(req, instruction, names, words)
            if why is None:
                stated.missing.append(req)
            else:
                stated.notes.append((req, why))
        seen.add((req.kind, req.value))
    return stated


def task_stated(task: Task) -> Stated:
    """``check_stated`` for ``task`` as gate 2 runs it: its ``environment/`` is given, and an SWE task owes only
    what its FAIL_TO_PASS tests check (its PASS_TO_PASS tests pass on the code as given)."""
    given = [task.path / "environment"] if task.path is not None else []
    swe = task.grader.kind == "swe" and bool(task.grader.fail_to_pass)
    only = task.grader.fail_to_pass if swe else None
    return check_stated(task.grader.tests_dir, task.instruction, task.environment.workdir, given, only)


def unstated_requirements(
    tests_dir: Path | None, instruction: str, workdir: str, given_dirs: Sequence[Path] = ()
) -> list[Requirement]:
    """The requirements the tests check that the instruction never states (gate 2 fails on any)."""
    return check_stated(tests_dir, instruction, workdir, given_dirs).missing
