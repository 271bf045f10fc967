"""Mutation operators (issue 30): each makes one small edit, the rest of the file is untouched, and the
same key gives the same mutations in the same order."""

import ast
import difflib
from pathlib import Path

import pytest

from fireflash.tasks.swe.mutate import OPERATORS, interleave, mutations

SOURCE = '''"""A module."""


def clamp(x, low=0, high=10, strict=False):
    """Clamp x."""
    if x < low:  # below
        return low
    elif x >= high:
        return high
    return x


def window(items, n):
    out = []
    for i in range(len(items) - n):
        out.append(items[i:i + n])
    return out


def pick(a, b):
    if a and b:
        result = a
    else:
        result = b
    return result


def double(x):
    return x * 2


class Box:
    def has(self, item):
        return item in self.items
'''


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    (tmp_path / "mod.py").write_text(SOURCE)
    return tmp_path


def _changed_lines(m) -> list[tuple[str, str]]:
    diff = [d for d in difflib.unified_diff(m.original.splitlines(), m.mutated.splitlines(), lineterm="", n=0)
            if d[:1] in "+-" and not d.startswith(("---", "+++"))]
    return diff


def test_every_operator_has_sites_and_edits_stay_small(pkg: Path) -> None:
    found = mutations(pkg, ["mod.py"], "demo-1.0-0")
    assert {m.operator for m in found} == set(OPERATORS)
    for m in found:
        ast.parse(m.mutated)
        assert m.mutated != m.original
        diff = _changed_lines(m)
        limit = 12 if m.operator == "swap_branches" else 6
        assert 0 < len(diff) <= limit, (m.slug, diff)
        assert "# below" in m.mutated or m.line == 6  # comments elsewhere are kept


def test_operators_make_the_expected_edits(pkg: Path) -> None:
    found = {(m.function, m.operator, m.index): m for m in mutations(pkg, ["mod.py"], "k")}
    assert "if x <= low:  # below" in found[("clamp", "compare", 0)].mutated
    assert "if a or b:" in found[("pick", "boolop", 0)].mutated
    assert "range(len(items) - n + 1)" in found[("window", "off_by_one", 0)].mutated
    slices = [m.mutated for (f, op, _), m in found.items() if f == "window" and op == "off_by_one"]
    assert any("items[i - 1:i + n]" in s for s in slices) and any("items[i:i + n - 1]" in s for s in slices)
    swapped = found[("pick", "swap_branches", 0)].mutated
    assert swapped.index("result = b") < swapped.index("result = a")
    assert "def clamp(x, low=1, high=10, strict=False)" in found[("clamp", "default", 0)].mutated
    assert "strict=True" in found[("clamp", "default", 2)].mutated
    assert "return x * 3" in found[("double", "constant", 0)].mutated
    assert "return item not in self.items" in found[("Box.has", "compare", 0)].mutated
    removed = [m for (f, op, _), m in found.items() if f == "window" and op == "remove_stmt"]
    assert any("out.append" not in m.mutated for m in removed)
    assert all('"""Clamp x."""' in m.mutated for m in found.values())  # docstrings are never removed


def test_deterministic_by_key_and_different_across_keys(pkg: Path) -> None:
    a = [m.slug for m in mutations(pkg, ["mod.py"], "demo-1.0-0")]
    assert a == [m.slug for m in mutations(pkg, ["mod.py"], "demo-1.0-0")]
    assert a != [m.slug for m in mutations(pkg, ["mod.py"], "demo-1.0-1")]
    assert sorted(a) == sorted(m.slug for m in mutations(pkg, ["mod.py"], "demo-1.0-1"))
    assert len(set(a)) == len(a)  # slugs (task ids) are unique


def test_interleave_mixes_operators_first(pkg: Path) -> None:
    found = mutations(pkg, ["mod.py"], "k")
    ops = [m.operator for m in found]
    assert len(set(ops[: len(OPERATORS)])) == len(OPERATORS)
    assert sorted(m.slug for m in interleave(found)) == sorted(m.slug for m in found)


def test_unparsable_files_are_skipped(pkg: Path) -> None:
    (pkg / "broken.py").write_text("def f(:\n")
    assert all(m.file == "mod.py" for m in mutations(pkg, ["broken.py", "mod.py"], "k"))
