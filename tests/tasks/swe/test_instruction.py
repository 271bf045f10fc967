"""The instruction writer (issue 30): the symptom a user would report, never the mutated file, line or fix."""

import dataclasses

import pytest

from fireflash.tasks.swe.instruction import (
    called_names,
    function_source,
    package_names,
    parse_failure,
    public_function,
    write_instruction,
)

# pytest --tb=short, a failure raised two frames below the test (the second frame is the mutated code)
SHORT_TB = """toolz/tests/test_itertoolz.py:118: in test_sliding_window
    assert list(sliding_window(2, [1, 2, 3, 4])) == [(1, 2), (2, 3), (3, 4)]
toolz/itertoolz.py:781: in sliding_window
    return zip(*iters[1:])
E   AssertionError: assert [(2, 3), (3, 4)] == [(1, 2), (2, 3), (3, 4)]
E     At index 0 diff: (2, 3) != (1, 2)
E     see toolz/itertoolz.py:781 for the change"""


def test_failure_keeps_the_test_statement_and_error_but_no_package_frame() -> None:
    f = parse_failure("toolz/tests/test_itertoolz.py::test_sliding_window", SHORT_TB, ["toolz/itertoolz.py", "itertoolz.py"])
    assert f.statement == "assert list(sliding_window(2, [1, 2, 3, 4])) == [(1, 2), (2, 3), (3, 4)]"
    assert f.error == ["AssertionError: assert [(2, 3), (3, 4)] == [(1, 2), (2, 3), (3, 4)]",
                       "At index 0 diff: (2, 3) != (1, 2)"]
    text = write_instruction("toolz", "1.2.0", [f], public_function([f], "sliding_window"))
    assert "toolz/itertoolz.py" not in text and "781" not in text and "iters[1:]" not in text
    assert "`sliding_window`" in text and f.statement in text and "/app" in text
    assert "toolz/tests/test_itertoolz.py::test_sliding_window" in text


def test_public_function_is_the_called_name_never_a_private_helper() -> None:
    f = parse_failure("t.py::test_a", "t.py:3: in test_a\n    assert inflection.ordinal(111) == 'th'\nE   AssertionError", [])
    assert called_names(f.statement) == ["ordinal"]
    assert public_function([f], "_irregular") == "ordinal"
    assert public_function([f], "Inflector.ordinal") == "ordinal"
    g = parse_failure("t.py::test_b", "t.py:3: in test_b\n    assert len(x) == 2\nE   assert 1 == 2", [])
    assert public_function([g], "_helper") is None
    h = parse_failure("t.py::T::test_c", "t.py:5: in test_c\n    self.assertEqual(cached.info(), 1)\nE   x", [])
    assert public_function([h], "_helper") == "info"  # unittest's assert methods are not the subject
    e = parse_failure("t.py::test_d", "t.py:5: in helper\n    raise OSError(err)\nE   OSError: b''", [])
    assert public_function([e], "_main") is None  # nor a builtin exception a test helper raises


def test_multiline_statements_and_many_failures() -> None:
    tb = "t.py:9: in test_m\n    assert (\n        f(1) ==\n        g(2)\n    )\nE   assert 1 == 2"
    failures = [parse_failure(f"t.py::test_{i}", tb, []) for i in range(15)]
    assert called_names(failures[0].statement) == ["f", "g"]
    text = write_instruction("pkg", "1.0", failures, "f")
    assert text.count("## `t.py::test_") == 3 and "and more." in text and "15 checks" in text


def test_no_statement_to_report_is_refused() -> None:
    f = parse_failure("t.py::test_x", "pkg/mod.py:3: in helper\n    x = 1\nE   ValueError", ["pkg/mod.py"])
    assert f.statement == ""
    with pytest.raises(ValueError, match="no failing test has a statement"):
        write_instruction("pkg", "1.0", [f], None)


TEST_FILE = '''import toolz
from toolz.functoolz import curry as cur


def helper(x):
    return x


class TestCurry:
    @pytest.mark.parametrize("n", [1, 2])
    def test_curry(self, n):
        f = cur(lambda a, b: a + b)
        check = lambda g: g(1)
        assert check(f(n)) == toolz.identity(n + 1)
'''


def test_reproduction_is_the_short_test_and_the_subject_a_package_function() -> None:
    nodeid = "t/test_f.py::TestCurry::test_curry[2]"
    src = function_source(TEST_FILE, nodeid)
    assert src.startswith('@pytest.mark.parametrize("n", [1, 2])\ndef test_curry(self, n):')
    names, modules = package_names(TEST_FILE, {"toolz"})
    assert names == {"cur"} and modules == {"toolz"}
    tb = ("t/test_f.py:14: in test_curry\n    assert check(f(n)) == toolz.identity(n + 1)\n"
          "E   assert <function <lambda> at 0x7f16280285e0> == 3")
    f = dataclasses.replace(parse_failure(nodeid, tb, []), test_source=src)
    assert f.error == ["assert <function <lambda> at 0x...> == 3"]  # addresses are noise
    # `check` is a test-local lambda: the subject is the package's function the statement calls
    assert public_function([f], "_private") == "check"
    assert public_function([f], "_private", names, modules) == "identity"
    text = write_instruction("toolz", "1.2.0", [f], "identity")
    assert src in text and "fails at this statement" in text
