"""Parsers for what a verifier leaves in ``/logs/verifier``: reward.txt, reward.json and JUnit XML.

Harbor's convention (STYLE.md 11): the task's test script writes ``reward.txt`` (one number) or
``reward.json`` (``{"reward": x, ...}``); pytest-style tests write a JUnit XML report. Anything else is a
named error, never a crash: malformed reports are the grader's problem to score, not to raise through
training (RECIPE.md §3, gate 8).
"""

from __future__ import annotations

import ast
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


class ReportError(ValueError):
    """A verifier report exists but cannot be read as a reward; the message names the file and the fix."""


def parse_reward_txt(data: bytes) -> float:
    """``reward.txt`` → reward in [0, 1].

    Raises:
        ReportError: not one finite number, or outside [0, 1].
    """
    text = data.decode("utf-8", errors="replace").strip()
    try:
        value = float(text)
    except ValueError:
        raise ReportError(f"reward.txt: expected one number in [0, 1], got {text[:80]!r}") from None
    return _check_range(value, "reward.txt")


def parse_reward_json(data: bytes) -> float:
    """``reward.json`` → reward in [0, 1]: the ``"reward"`` key, or the only numeric value.

    Raises:
        ReportError: not a JSON object, no numeric ``reward`` (and not exactly one numeric value), or out of range.
    """
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"reward.json: not valid UTF-8 JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ReportError(f'reward.json: expected an object like {{"reward": 1.0}}, got {type(obj).__name__}')
    numeric = {k: v for k, v in obj.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    if "reward" in obj:
        if "reward" not in numeric:
            raise ReportError(f"reward.json: 'reward' must be a number, got {obj['reward']!r}")
        return _check_range(float(numeric["reward"]), "reward.json")
    if len(numeric) == 1:
        return _check_range(float(next(iter(numeric.values()))), "reward.json")
    raise ReportError(
        f"reward.json: no 'reward' key and {len(numeric)} numeric values; write {{\"reward\": x}}"
    )


def _check_range(value: float, name: str) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ReportError(f"{name}: reward {value!r} is outside [0, 1]")
    return value


@dataclass(frozen=True)
class CheckResult:
    """One test case of a JUnit report."""

    id: str  # dotted key: "<classname>.<name>", e.g. "tests.test_outputs.test_sorted"
    passed: bool  # False for failure, error and skipped: a check that did not pass did not pass
    message: str = ""


_INVALID_XML_CHARS = re.compile(r"[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def parse_junit(data: bytes) -> list[CheckResult]:
    """JUnit XML (pytest ``--junitxml`` or the bundled runner) → one ``CheckResult`` per test case.

    A test case reported twice (reruns) passes only if every report of it passes.

    Raises:
        ReportError: the bytes are not a JUnit XML document.
    """
    text = _INVALID_XML_CHARS.sub("\ufffd", data.decode("utf-8", errors="replace"))
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ReportError(f"junit.xml: not valid XML ({e})") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ReportError(f"junit.xml: root element is <{root.tag}>, expected <testsuites> or <testsuite>")
    results: dict[str, CheckResult] = {}
    for case in root.iter("testcase"):
        key = ".".join(p for p in (case.get("classname", ""), case.get("name", "")) if p)
        bad = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        result = CheckResult(
            key, bad is None, "" if bad is None else f"{bad.tag}: {bad.get('message', '')}"[:300]
        )
        previous = results.get(key)
        results[key] = result if previous is None or previous.passed else previous
    return list(results.values())


def junit_key(test_id: str) -> str:
    """A pytest node id → the dotted key JUnit uses: ``tests/test_a.py::TestX::test_y`` → ``tests.test_a.TestX.test_y``.

    Parameters (``test_y[...]``) are kept verbatim: they may hold ``::`` or dots (``test_q[https://[::1]:80/]``).
    """
    head, params = _split_params(test_id)
    path, _, rest = head.partition("::")
    module = path.removesuffix(".py")
    module = module.strip("/").replace("/", ".")
    return ".".join(p for p in [module, *rest.split("::")] if p) + params


def _split_params(text: str) -> tuple[str, str]:
    """(``test_y``, ``[...]``): a node id or dotted key and its parametrisation (from the first ``[``; ``""``: none)."""
    i = text.find("[")
    return (text, "") if i < 0 else (text[:i], text[i:])


def match_checks(expected_ids: Iterable[str], results: list[CheckResult]) -> dict[str, bool]:
    """For each expected test id, whether it passed; missing or ambiguous ids count as failed.

    JUnit class names depend on pytest's rootdir (``tests.test_a`` or ``test_a``), so an id matches a
    case when one dotted key is a component-wise suffix of the other, and only one case matches.
    """
    outcome: dict[str, bool] = {}
    for test_id in expected_ids:
        key = junit_key(test_id)
        exact = [r for r in results if r.id == key]
        found = exact or [r for r in results if _suffix_match(key, r.id)]
        outcome[test_id] = len(found) == 1 and found[0].passed
    return outcome


def _suffix_match(a: str, b: str) -> bool:
    short, long = sorted((_components(a), _components(b)), key=len)
    return long[len(long) - len(short) :] == short


def _components(key: str) -> list[str]:
    """A dotted key's components; dots and ``::`` inside its parametrisation do not split it."""
    head, params = _split_params(key)
    parts = head.split(".")
    parts[-1] += params
    return parts


def declared_checks(tests_dir: Path | None) -> list[str]:
    """The checks a task's test files declare, as pytest node ids, read from their source (AST).

    Test files are ``test_*.py`` and ``*_test.py`` anywhere under ``tests_dir``; their checks are the
    module-level ``test_*`` functions and the ``test_*`` methods of module-level ``Test*`` classes
    (``sub/test_a.py::TestX::test_y``). Read on the host from the task's own files, independently of any
    run, so code the tests import cannot remove a check from the list. A file that does not parse
    declares nothing here (the runner then reports its import failure).

    Returns:
        Node ids in file order; empty when ``tests_dir`` is None, missing or declares no test.
    """
    if tests_dir is None or not tests_dir.is_dir():
        return []
    ids: list[str] = []
    files = sorted(
        p for p in tests_dir.rglob("*.py") if p.name.startswith("test_") or p.stem.endswith("_test")
    )
    for path in files:
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        rel = path.relative_to(tests_dir).as_posix()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                ids.append(f"{rel}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                ids += [
                    f"{rel}::{node.name}::{m.name}"
                    for m in node.body
                    if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test")
                ]
    return ids


_PARAMS = re.compile(r"\[.*\]$", re.DOTALL)


def match_declared(declared_ids: Iterable[str], results: list[CheckResult]) -> dict[str, bool]:
    """Whether each declared check passed; a declared function with no report case fails.

    A declared function matches the cases named like it, parametrised or not (``test_x`` and ``test_x[1]``),
    whose dotted key ends with the declared one component-wise (pytest's class names depend on its rootdir).
    One matching case gives one check under the declared id; several (parametrised) give one check each,
    keyed ``<declared id>[<params>]``, so partial credit stays per case. Missing, skipped or failed cases
    fail; cases the declaration does not name are ignored.
    """
    outcome: dict[str, bool] = {}
    for test_id in declared_ids:
        key = junit_key(test_id)
        found = [r for r in results if _suffix_match(key, _PARAMS.sub("", r.id))]
        if len(found) <= 1:
            outcome[test_id] = bool(found) and found[0].passed
            continue
        for r in found:
            params = _PARAMS.search(r.id)
            outcome[f"{test_id}{params.group(0) if params else '#' + r.id}"] = r.passed
    return outcome
