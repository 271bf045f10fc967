"""Bugs by procedural mutation: one AST edit in one function of a package's source (issue 30, deliverable 2).

Operators (the names in mutation ids), each a small textual edit at one AST node so the rest of the file,
comments included, is untouched and the reverse patch is a few lines:

    compare       a comparison operator flipped to its neighbour (< ↔ <=, > ↔ >=, == ↔ !=, in ↔ not in, is ↔ is not)
    boolop        ``and`` ↔ ``or``
    off_by_one    a ``range(...)`` argument or a slice bound moved by one (``x`` → ``x + 1``, ``x - 1``)
    swap_branches the bodies of an ``if ...: ... else: ...`` swapped
    remove_stmt   one statement (at most 3 lines) of a body with at least two removed (a guard, an update,
                  an early return)
    constant      an integer constant n → n + 1, ``True`` ↔ ``False``
    default       a parameter's default value changed the same way

Deterministic: ``mutations(root, files, key)`` lists every site in a fixed order (file, function, walk order)
shuffles it with ``random.Random(key)``, then interleaves the operators; the key is ``"<package>-<version>-<seed>"``, so the same package,
version and seed give the same mutations in the same order. Test files and functions in them are never mutated.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

COMPARE_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
MAX_REMOVED_LINES = 3
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)
T = TypeVar("T")
OPERATORS = ("compare", "boolop", "off_by_one", "swap_branches", "remove_stmt", "constant", "default")


@dataclass(frozen=True)
class Mutation:
    """One mutated copy of one source file.

    Attributes:
        file: the source file, relative to the package's source root (``toolz/itertoolz.py``).
        function: the mutated function's qualified name (``Class.method`` or ``function``).
        operator: one of ``OPERATORS``.
        index: the site's number among this operator's sites in this function (0-based), for the id.
        line: the 1-based line of the edit (never shown to the agent).
        original: the file's text before; ``mutated``: after.
    """

    file: str
    function: str
    operator: str
    index: int
    line: int
    original: str
    mutated: str

    @property
    def slug(self) -> str:
        """``<module>-<function>-<operator>-<index>``, safe in a directory name (``itertoolz-sliding_window-compare-0``;
        the module is the file's dotted path without the top package folder)."""
        parts = Path(self.file).with_suffix("").parts
        module = ".".join(parts[1:] if len(parts) > 1 else parts)  # unique within the package
        return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{module}-{self.function}-{self.operator}-{self.index}")


def mutations(root: Path, files: list[str], key: str, limit: int | None = None) -> list[Mutation]:
    """The single-edit mutations of the functions in ``files`` (relative to ``root``), ordered by ``key``.

    Every site is listed (cheap), shuffled and interleaved; then edits are applied in that order, keeping
    those that give a different, parseable file, until ``limit`` (all when None): a large package (boltons,
    ~20k lines) is not parsed once per site. Files that do not parse are skipped.
    """
    texts: dict[str, str] = {}
    sites: list[_Site] = []
    for rel in sorted(files):
        text = (root / rel).read_text(encoding="utf-8")
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        texts[rel] = text
        for qualname, func in _functions(tree):
            counts: dict[str, int] = {}
            for operator, line, edits in _sites(text, func):
                if edits:
                    counts[operator] = counts.get(operator, 0) + 1
                    sites.append(_Site(rel, qualname, operator, counts[operator] - 1, line, tuple(edits)))
    random.Random(key).shuffle(sites)
    dumps: dict[str, str] = {}
    out: list[Mutation] = []
    for s in interleave(sites):
        text = texts[s.file]
        mutated = _apply(text, list(s.edits))
        try:
            after = ast.dump(ast.parse(mutated))
        except (SyntaxError, ValueError):
            continue
        if s.file not in dumps:
            dumps[s.file] = ast.dump(ast.parse(text))
        if after == dumps[s.file]:
            continue
        out.append(Mutation(s.file, s.function, s.operator, s.index, s.line, text, mutated))
        if limit is not None and len(out) >= limit:
            break
    return out


@dataclass(frozen=True)
class _Site:
    """A mutation before its edits are applied (``Mutation`` without the texts)."""

    file: str
    function: str
    operator: str
    index: int
    line: int
    edits: tuple


def interleave(found: list[T]) -> list[T]:
    """Round-robin over operators (first-seen order), each operator's mutations in their order: a short
    prefix of the list mixes every kind of bug instead of mostly removed statements (the most common site)."""
    by_op: dict[str, list[T]] = {}
    for m in found:
        by_op.setdefault(m.operator, []).append(m)
    out: list[T] = []
    for i in range(max((len(v) for v in by_op.values()), default=0)):
        out += [v[i] for v in by_op.values() if i < len(v)]
    return out


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions and methods of module-level classes, with qualified names (nested ones are
    part of their enclosing function)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{item.name}", item


# An edit replaces the text between two (line, col) positions (1-based lines, 0-based UTF-8 byte columns as
# the ast gives them) with new text.
Edit = tuple[tuple[int, int], tuple[int, int], str]


def _span(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
    return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


def _sites(text: str, func: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[str, int, list[Edit]]]:
    """(operator, line, edits) for every mutation site in ``func``, in a fixed walk order."""
    lines = text.splitlines(keepends=True)
    docstring = ast.get_docstring(func, clean=False) is not None
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE_FLIP:
            new = ast.Compare(node.left, [COMPARE_FLIP[type(node.ops[0])]()], node.comparators)
            yield "compare", node.lineno, [(*_span(node), _unparse(new))]
        elif isinstance(node, ast.BoolOp):
            new = ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
            yield "boolop", node.lineno, [(*_span(node), _unparse(new))]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            for arg in node.args[:2]:
                yield "off_by_one", arg.lineno, [(*_span(arg), _shift(arg, +1))]
        elif isinstance(node, ast.Slice):
            for bound in (node.lower, node.upper):
                if bound is not None:
                    yield "off_by_one", bound.lineno, [(*_span(bound), _shift(bound, -1))]
        elif isinstance(node, ast.If) and node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
            yield "swap_branches", node.lineno, _swap(lines, node)
        elif (isinstance(node, ast.Constant) and type(node.value) in (int, bool) and node.lineno != func.lineno
              and not _in_defaults(func, node)):
            yield "constant", node.lineno, [(*_span(node), _changed(node.value))]
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and len(body) >= 2 and not isinstance(node, ast.Module):
                for i, stmt in enumerate(body):
                    if i == 0 and node is func and docstring:
                        continue
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        continue
                    if stmt.end_lineno - stmt.lineno >= MAX_REMOVED_LINES:
                        continue  # a whole block gone is a rewrite to ask for, not a bug to find
                    if len(body) - (1 if node is func and docstring else 0) < 2:
                        continue
                    yield "remove_stmt", stmt.lineno, [_remove(lines, stmt)]
    args = func.args
    for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        if isinstance(default, ast.Constant) and type(default.value) in (int, bool):
            yield "default", default.lineno, [(*_span(default), _changed(default.value))]


def _in_defaults(func: ast.FunctionDef | ast.AsyncFunctionDef, node: ast.AST) -> bool:
    return any(node is d for d in [*func.args.defaults, *func.args.kw_defaults])


def _changed(value: int | bool) -> str:
    if isinstance(value, bool):
        return repr(not value)
    return repr(value + 1)


def _shift(node: ast.expr, delta: int) -> str:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return repr(node.value + delta)
    return f"{_unparse(node, parens=True)} {'+' if delta > 0 else '-'} {abs(delta)}"


def _unparse(node: ast.AST, parens: bool = False) -> str:
    text = ast.unparse(node)
    # `x + 1` needs no parentheses around x when x binds at least as tightly as + (a left operand)
    tight = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.UnaryOp)) or (
        isinstance(node, ast.BinOp) and isinstance(node.op, ARITHMETIC))
    if parens and not tight:
        return f"({text})"
    return text


def _whole_lines(lines: list[str], first: int, last: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The span of lines ``first``..``last`` (1-based, inclusive) including the last newline."""
    return (first, 0), (last + 1, 0) if last < len(lines) else (last, len(lines[last - 1].encode()))


def _remove(lines: list[str], stmt: ast.stmt) -> Edit:
    start, end = _whole_lines(lines, stmt.lineno, stmt.end_lineno)
    prefix = lines[stmt.lineno - 1].encode()[: stmt.col_offset].decode(errors="replace")
    if prefix.strip() or (stmt.end_lineno <= len(lines) and lines[stmt.end_lineno - 1].rstrip().endswith(";")):
        return (*_span(stmt), "pass")  # shares its line with other code: replace it in place
    return start, end, ""


def _swap(lines: list[str], node: ast.If) -> list[Edit]:
    """Swap the line blocks of an if's body and else (both indented alike under ``if``/``else:``)."""
    body = "".join(lines[node.body[0].lineno - 1 : node.body[-1].end_lineno])
    orelse = "".join(lines[node.orelse[0].lineno - 1 : node.orelse[-1].end_lineno])
    if node.body[0].lineno == node.lineno or node.orelse[0].col_offset != node.body[0].col_offset:
        return []  # a one-line `if c: x` or an odd layout: not swapped
    return [(*_whole_lines(lines, node.body[0].lineno, node.body[-1].end_lineno), orelse),
            (*_whole_lines(lines, node.orelse[0].lineno, node.orelse[-1].end_lineno), body)]


def _apply(text: str, edits: list[Edit]) -> str:
    """``text`` with ``edits`` applied (non-overlapping; positions refer to the original text)."""
    if not edits:
        return text
    data = text.encode()
    starts = [0]
    for line in text.encode().splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    def offset(pos: tuple[int, int]) -> int:
        line, col = pos
        return min(starts[line - 1] + col, len(data)) if line - 1 < len(starts) else len(data)
    out = data
    for start, end, new in sorted(edits, key=lambda e: offset(e[0]), reverse=True):
        out = out[: offset(start)] + new.encode() + out[offset(end) :]
    return out.decode()
