"""The stdlib runner's proxy of plain data (issue 27): the checks run in a process that never runs the code
under test; that code runs in its own process, and only plain data crosses.

Each forgery below made every check pass when the code under test ran in the checks' process (the runner
before the proxy); each honest shape below is one a bundled task's tests use (a function of dates, a class
instance with attributes, an exception the check catches)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fireflash.grading import junit_runner
from fireflash.grading.reports import parse_junit

pytestmark = pytest.mark.unit
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def run(
    tmp_path, module: str, checks: str, *extra: str
) -> tuple[subprocess.CompletedProcess, dict[str, bool]]:
    """Run ``checks`` (a test file) in ``tmp_path`` with ``mymod.py`` (the code under test) beside it."""
    (tmp_path / "mymod.py").write_text(textwrap.dedent(module))
    (tmp_path / "tests").mkdir(exist_ok=True)
    test_file = tmp_path / "tests" / "test_things.py"
    test_file.write_text(textwrap.dedent(checks))
    report = tmp_path / "out" / "junit.xml"
    proc = subprocess.run(
        [PYTHON, junit_runner.__file__, "--junitxml", str(report), str(test_file), *extra],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    return proc, {r.id.split(".", 1)[1]: r.passed for r in parse_junit(report.read_bytes())}


# the check of a binary search that the unfixed code fails
WRONG = "def search(xs, x):\n    return 0\n"
CHECK = "from mymod import search\n\ndef test_finds():\n    assert search([1, 2, 3], 3) == 2\n\ndef test_other():\n    assert search([5], 5) == 0\n"


def test_an_object_equal_to_everything_is_not_equal(tmp_path):
    module = WRONG.replace("return 0", "return Any(0)") + (
        "class Any(int):\n    def __eq__(self, other):\n        return True\n"
        "    __ne__ = lambda self, other: False\n    __hash__ = int.__hash__\n"
        "class Obj:\n    def __eq__(self, other):\n        return True\n"
        "def anything():\n    return Obj()\n"
    )
    module += (
        "class Bag:\n    def __contains__(self, item):\n        return True\n"
        "    def __iter__(self):\n        return iter([])\n"
        "def names():\n    return Bag()\n"
    )
    checks = CHECK + (
        "\ndef test_obj():\n    from mymod import anything\n    assert anything() == 7\n"
        "\ndef test_two_objects():\n    from mymod import anything\n    assert anything() == anything()\n"
        "\ndef test_contains():\n    from mymod import names\n    assert 'alice' in names()\n"
    )
    _, results = run(tmp_path, module, checks)
    # Any(0) crosses as the int 0: honest where 0 is right, wrong elsewhere; Obj crosses as a reference equal
    # only to itself, even to another of its kind; "in" walks the Bag's items instead of asking it
    assert results == {
        "test_finds": False,
        "test_other": True,
        "test_obj": False,
        "test_two_objects": False,
        "test_contains": False,
    }


REPLACE_TEST_CODE = """
import sys
_f = sys._getframe(1)
while _f is not None and '/tests/' not in _f.f_code.co_filename:
    _f = _f.f_back
if _f is not None:
    for k, v in list(_f.f_globals.items()):
        if k.startswith('test_') and callable(v):
            v.__code__ = (lambda: None).__code__
    def _p(frame, event, arg):
        if frame is _f and event == 'return':
            for k, v in list(frame.f_globals.items()):
                if k.startswith('test_') and callable(v):
                    v.__code__ = (lambda: None).__code__
            sys.setprofile(None)
    sys.setprofile(_p)
"""


def test_code_under_test_cannot_replace_the_checks(tmp_path):
    _, results = run(tmp_path, WRONG + REPLACE_TEST_CODE, CHECK)
    assert results == {"test_finds": False, "test_other": True}


PIPE_FORGE = """
import json, os, stat
for _fd in os.listdir('/proc/self/fd'):
    try:
        if stat.S_ISFIFO(os.fstat(int(_fd)).st_mode):
            for _i in range(16):
                os.write(int(_fd), (json.dumps(["case", _i, 0.0, None]) + "\\n").encode())
    except OSError:
        pass
"""


def test_code_under_test_cannot_write_outcomes(tmp_path):
    """It has no outcome pipe; what it writes into its own answer pipe is garbage that fails the check."""
    _, results = run(tmp_path, WRONG + PIPE_FORGE, CHECK)
    assert results == {"test_finds": False, "test_other": False}
    # the same forgery sent later, in a call: the import went well, the call's answer is garbage
    module = WRONG.replace("return 0", "exec(FORGE)\n    return 0") + f"FORGE = {PIPE_FORGE!r}\n"
    _, results = run(tmp_path, module, CHECK)
    assert results == {"test_finds": False, "test_other": False}


def test_code_under_test_runs_in_another_process(tmp_path):
    module = "import os\nPID = os.getpid()\ndef pid():\n    return os.getpid()\n"
    checks = "import os\nimport mymod\n\ndef test_elsewhere():\n    assert mymod.PID == mymod.pid() != os.getpid()\n"
    _, results = run(tmp_path, module, checks)
    assert results == {"test_elsewhere": True}


def test_a_hang_or_death_fails_its_check_even_when_the_check_swallows_it(tmp_path):
    """A failed call poisons its check (``except Exception`` cannot hide it); the next check gets a fresh
    process in which names reached by import are looked up again."""
    module = "import os\nCOUNT = 0\ndef hang():\n    while True:\n        pass\ndef die():\n    os._exit(3)\ndef inc():\n    global COUNT\n    COUNT += 1\n    return COUNT\n"
    checks = (
        "from mymod import die, hang, inc\n\n"
        "def test_hang():\n    try:\n        hang()\n    except Exception:\n        pass\n\n"
        "def test_after_hang():\n    assert inc() == 1\n\n"
        "def test_die():\n    try:\n        die()\n    except Exception:\n        pass\n\n"
        "def test_after_die():\n    assert inc() == 1 and inc() == 2\n"
    )
    proc, results = run(tmp_path, module, checks, "--timeout-sec", "1")
    assert results == {"test_hang": False, "test_after_hang": True, "test_die": False, "test_after_die": True}
    assert "process died" in proc.stdout


def test_plain_data_round_trips_as_stdlib_types(tmp_path):
    module = """
    import collections, datetime, decimal, fractions
    P = collections.namedtuple("P", "x y")
    def values():
        return [None, True, 3, 2.5, "s\\udcff", b"\\xff", (1,), {1}, frozenset({2}), {(1, 2): [3]},
                datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.timedelta(days=1),
                decimal.Decimal("1.10"), fractions.Fraction(1, 3), 1 + 2j, collections.Counter("aab"),
                collections.OrderedDict(a=1), P(1, 2)]
    def echo(*args, **kwargs):
        return [args, kwargs]
    def counts():
        return collections.defaultdict(int, a=1)
    def numbers():
        yield from range(3)
    """
    checks = """
    import collections, datetime, decimal, fractions
    from mymod import counts, echo, numbers, values

    def test_values():
        got = values()
        assert got[:10] == [None, True, 3, 2.5, "s\\udcff", b"\\xff", (1,), {1}, frozenset({2}), {(1, 2): [3]}]
        assert got[10:16] == [datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 2, 3, 4, 5),
                              datetime.timedelta(days=1), decimal.Decimal("1.10"), fractions.Fraction(1, 3), 1 + 2j]
        assert type(got[10]) is datetime.date and got[16]["z"] == 0 and got[18].y == 2 and got[18] == (1, 2)

    def test_arguments():
        day = datetime.date(2024, 1, 1)
        assert echo(day, [b"x"], key={"k": (1, 2)}) == [(day, [b"x"]), {"key": {"k": (1, 2)}}]

    def test_defaultdict_and_generator():
        assert counts()["missing"] == 0 and list(numbers()) == [0, 1, 2]

    def test_a_function_cannot_cross():
        try:
            echo(lambda: 1)
        except TypeError as e:
            assert "plain data" in str(e)
            return
        raise AssertionError("no TypeError")
    """
    _, results = run(tmp_path, module, checks)
    assert all(results.values()) and len(results) == 4, results


def test_classes_instances_and_exceptions(tmp_path):
    """The shapes of swe-lru-cache and swe-inventory-stock: an instance, its attributes, its errors."""
    module = """
    class OutOfStock(ValueError):
        pass
    class Inventory:
        def __init__(self):
            self.stock = {}
        def add(self, name, n):
            self.stock[name] = self.stock.get(name, 0) + n
        def remove(self, name, n):
            if name not in self.stock:
                raise KeyError(name)
            if n > self.stock[name]:
                raise OutOfStock(f"only {self.stock[name]}")
            self.stock[name] -= n
        def __len__(self):
            return len(self.stock)
    """
    checks = """
    import mymod
    from mymod import Inventory, OutOfStock

    def test_instance():
        inv = Inventory()
        inv.add("bolt", 3)
        assert inv.stock["bolt"] == 3 and len(inv) == 1 and isinstance(inv, Inventory) and inv == inv

    def test_errors():
        inv = Inventory()
        inv.add("nut", 2)
        try:
            inv.remove("nut", 5)
        except ValueError as e:
            assert type(e) is OutOfStock is mymod.OutOfStock and str(e) == "only 2"
        try:
            inv.remove("ghost", 1)
        except KeyError as e:
            assert e.args == ("ghost",)
            return
        raise AssertionError("no KeyError")
    """
    _, results = run(tmp_path, module, checks)
    assert results == {"test_instance": True, "test_errors": True}


def test_a_test_file_may_put_a_directory_on_sys_path(tmp_path):
    """The generated families' checks do ``sys.path.insert(0, '/app')`` and import a package inside a check."""
    (tmp_path / "app" / "pkg").mkdir(parents=True)
    (tmp_path / "app" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "app" / "pkg" / "calc.py").write_text("import os\ndef pid():\n    return os.getpid()\n")
    checks = f"import os, sys\nsys.path.insert(0, {str(tmp_path / 'app')!r})\n\ndef test_fixed():\n    from pkg.calc import pid\n    import pkg\n    assert pid() != os.getpid() and pkg.calc.pid() == pid()\n"
    _, results = run(tmp_path, "", checks)
    assert results == {"test_fixed": True}


def test_a_missing_module_is_an_import_error(tmp_path):
    checks = "try:\n    import no_such_module\nexcept ImportError:\n    MISSING = True\n\ndef test_missing():\n    assert MISSING\n"
    _, results = run(tmp_path, "", checks)
    assert results == {"test_missing": True}


def test_the_stdlibs_optional_imports_never_reach_the_workdir(tmp_path):
    """pathlib imports ntpath, which tries ``_winapi``: a workdir ``_winapi.py`` must not be imported for it
    (only the test file's own imports go to the agent process)."""
    (tmp_path / "_winapi.py").write_text("open('imported', 'w').close()\n")
    checks = "import os\nfrom pathlib import Path\n\ndef test_not_imported():\n    assert Path('.').exists() and not os.path.exists('imported')\n"
    _, results = run(tmp_path, "", checks)
    assert results == {"test_not_imported": True}


def test_subclasses_of_plain_types_cross_as_the_plain_value(tmp_path):
    # a str or int subclass whose __eq__ says yes, alone or nested in a list or dict: only its value crosses
    module = """
        class S(str):
            def __eq__(self, other): return True
            __hash__ = str.__hash__
        class I(int):
            def __eq__(self, other): return True
            __hash__ = int.__hash__
        def f(): return S("wrong")
        def g(): return I(5)
        def h(): return [S("x"), {"k": I(1)}]
        def right(): return [S("y"), {"k": I(2)}]
    """
    checks = """
        from mymod import f, g, h, right
        def test_f():
            assert f() == "right"
        def test_g():
            assert g() == 7
        def test_h():
            assert h() == ["y", {"k": 2}]
        def test_right():
            assert right() == ["y", {"k": 2}]
    """
    _, results = run(tmp_path, module, checks)
    assert results == {"test_f": False, "test_g": False, "test_h": False, "test_right": True}
