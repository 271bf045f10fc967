"""The package import graph of src/fireflash follows the pipeline (issue 28, docs/architecture.md).

Every import counts: module-level and lazy (inside functions, under ``TYPE_CHECKING``), absolute and
relative, ``from fireflash import x``, and dotted module paths written as strings (``tasks/__init__``'s lazy
exports, plug-in defaults) that ``importlib`` resolves. A string after ``"-m"`` in a command line starts a
child process (``python -m fireflash.cli.serve``), not an import, and is not counted. The graph is read with
``ast`` (nothing is imported), as ``../shared/tools/import_graph.py`` does.

Checked: no cycle among packages; every import points down ``LAYERS`` (DESIGN.md's table, bottom first);
the "must not know about" column of that table where the order alone allows an import.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fireflash"

# DESIGN.md's package table, bottom first; an import may only point to an earlier row. Top-level modules
# (protocols.py, models.py, tracking.py, config.py) are packages of their own here.
LAYERS = [
    "protocols",
    "models",
    "tracking",  # metrics files: written by runtime and sft, read by evaluation (not in DESIGN.md's table)
    "progress",  # progress lines of long jobs (tasks' image builds, probing, commands; not in DESIGN.md's table)
    "rl",
    "sandbox",
    "grading",
    "harness",
    "training",
    "engines",
    "tasks",
    "rollout",
    "curation",
    "evaluation",
    "runtime",
    "sft",
    "config",  # the tree of every stage's *Config: above the stages, which never import it
    "cli",
]
# DESIGN.md's "must not know about" column, where the order above alone would allow the import; sandbox and
# grading import only protocols (../shared/tools/import_graph.py's rule)
FORBIDDEN = {
    "rl": set(LAYERS) - {"rl"},  # depends on torch only
    "sandbox": set(LAYERS) - {"sandbox", "protocols"},
    "grading": set(LAYERS) - {"grading", "protocols"},
    "training": {"sandbox", "harness"},
    "engines": {"grading"},  # rewards
    "tasks": {"engines", "training"},
    "rollout": {"training"},
    "curation": {"training"},
    "evaluation": {"training"},
}
_MODULE_PATH = re.compile(r"fireflash(\.[A-Za-z_][A-Za-z0-9_]*)+")


def package_of(path: Path, root: Path) -> str:
    """``fireflash/tasks/loader.py`` → 'tasks'; ``fireflash/config.py`` → 'config'; the root ``__init__`` → 'fireflash'."""
    rel = path.relative_to(root).with_suffix("").parts
    return rel[0] if len(rel) > 1 else ("fireflash" if rel[0] == "__init__" else rel[0])


def _module_name(path: Path, root: Path) -> list[str]:
    parts = ["fireflash", *path.relative_to(root).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(path: Path, root: Path) -> list[tuple[str, int]]:
    """Every ``fireflash`` module ``path`` imports, with its line: absolute, relative, lazy, or a dotted string."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_name(path, root)
    package = here if path.name == "__init__.py" else here[:-1]
    found: list[tuple[str, int]] = []
    process_args: set[int] = set()  # id() of strings that follow "-m" in a list or tuple: a child process
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            for before, item in zip(node.elts, node.elts[1:]):
                if isinstance(before, ast.Constant) and before.value == "-m":
                    process_args.add(id(item))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from fireflash import doctor` imports the module fireflash.doctor
            found += [(f"{base}.{a.name}", node.lineno) for a in node.names]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in process_args
              and _MODULE_PATH.fullmatch(node.value)):
            found.append((node.value, node.lineno))
    return [(m, line) for m, line in found if m.startswith("fireflash.")]


def import_edges(root: Path) -> dict[tuple[str, str], list[str]]:
    """(package, imported package) → the 'file:line module' sites, for every package under ``root``
    (the bundled task data excluded: it is task content, not FireFlash code)."""
    packages = {p.stem if p.is_file() else p.name for p in root.iterdir()
                if (p.is_dir() and p.name != "__pycache__") or p.suffix == ".py"}
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if "data" in path.relative_to(root).parts:
            continue
        src = package_of(path, root)
        for module, line in imported_modules(path, root):
            dst = module.split(".")[1]
            if dst in packages and dst != src:
                edges[(src, dst)].append(f"{path.relative_to(root.parent)}:{line} {module}")
    return dict(edges)


def package_cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan), each sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in edges:
        graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            components.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return sorted(c for c in components if len(c) > 1)


def rule_breaks(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Every import that points up ``LAYERS``, hits ``FORBIDDEN``, or starts from a package missing from the table."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    breaks = []
    for (src, dst), sites in sorted(edges.items()):
        if src == "fireflash" or dst == "fireflash":  # the root __init__: version string only
            continue
        if src not in rank or dst not in rank:
            breaks.append(f"{src} -> {dst}: add the new package to LAYERS and docs/architecture.md ({sites[0]})")
        elif rank[dst] > rank[src]:
            breaks.append(f"{src} -> {dst} points up the table ({'; '.join(sites)})")
        elif dst in FORBIDDEN.get(src, ()):
            breaks.append(f"{src} -> {dst}: {src} must not know about {dst} ({'; '.join(sites)})")
    return breaks


def missing_modules(root: Path) -> list[str]:
    """Imports of a ``fireflash`` module that does not exist under ``root`` ('file:line module'): a lazy import
    left behind by a move fails only when its function runs."""
    def exists(module: str) -> bool:
        path = root.parent.joinpath(*module.split("."))
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    missing = []
    for path in sorted(root.rglob("*.py")):
        if "data" in path.relative_to(root).parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_PATH.fullmatch(node.value):
                # a module, or a module's attribute ("fireflash.sandbox.bwrap.BwrapBackend")
                modules = [node.value] if exists(node.value) else [node.value.rsplit(".", 1)[0]]
            else:
                continue
            missing += [f"{path.relative_to(root.parent)}:{node.lineno} {m}" for m in modules
                        if m.startswith("fireflash.") and not exists(m)]
    return missing


@pytest.mark.unit
def test_every_import_names_a_module_that_exists():
    assert missing_modules(SRC) == []


@pytest.mark.unit
def test_no_package_cycle():
    cycles = package_cycles(import_edges(SRC))
    assert cycles == [], "package cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.unit
def test_imports_point_down_the_pipeline():
    breaks = rule_breaks(import_edges(SRC))
    assert breaks == [], "\n".join(breaks)


@pytest.mark.unit
def test_every_package_is_in_the_table():
    packages = {package_of(p, SRC) for p in SRC.rglob("*.py") if "data" not in p.relative_to(SRC).parts}
    missing = packages - {"fireflash"} - set(LAYERS)
    assert missing == set(), f"not in LAYERS (nor docs/architecture.md): {sorted(missing)}"


@pytest.mark.unit
def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The reader counts lazy, relative, ``from fireflash import x`` and string imports, and not ``-m`` targets."""
    root = tmp_path / "fireflash"
    (root / "tasks").mkdir(parents=True)
    (root / "sft").mkdir()
    (root / "cli").mkdir()
    for pkg in ("tasks", "sft", "cli"):
        (root / pkg / "__init__.py").write_text("")
    (root / "tasks" / "a.py").write_text("def f():\n    from fireflash.sft import b\n")  # lazy
    (root / "tasks" / "c.py").write_text("from ..sft import b\n")  # relative
    (root / "sft" / "b.py").write_text('EXPORTS = {"x": "fireflash.tasks.a"}\n')  # importlib string
    (root / "sft" / "d.py").write_text('CMD = ["python", "-m", "fireflash.cli.serve"]\nfrom fireflash import cli\n')
    edges = import_edges(root)
    assert sorted(edges) == [("sft", "cli"), ("sft", "tasks"), ("tasks", "sft")]
    assert len(edges[("tasks", "sft")]) == 2
    assert edges[("sft", "cli")] == ["fireflash/sft/d.py:2 fireflash.cli"]
    assert package_cycles(edges) == [["sft", "tasks"]]
