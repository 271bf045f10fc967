"""A stdlib-only test runner that writes JUnit XML, for sandboxes whose python3 has no pytest.

Bundled tasks ship a byte-identical copy as ``tests/junit_runner.py`` (a unit test keeps the copies in
sync). It runs the ``test_*`` functions of pytest-style files (plain ``assert``), each with its own
time limit, in definition order, and records every one in the report; a file that fails to import
records one failed case per test it defines (or one ``collection`` case), so no check goes missing.

Fail closed: the checks a file declares are read from its source (AST: module-level ``test_*``
functions), independently of importing it; a declared check that is not found after the import (deleted
or renamed by code the import ran, e.g. a shadowed stdlib module) is recorded as failed.

Isolation: the working directory (where the code under test lives) goes on ``sys.path`` *after* the
standard library and site-packages, so a ``csv.py`` in it cannot shadow ``csv``; the user site and
``.pth``-style start-up hooks are the verifier's concern (it runs this with a clean environment). The
report is written last and the process leaves with ``os._exit``: ``atexit`` hooks and threads started by
the code under test never run after the report is written.

    python3 /tests/junit_runner.py --junitxml /logs/verifier/junit.xml /tests/test_outputs.py
"""

import argparse
import ast
import importlib.util
import os
import signal
import sys
import time
import traceback
import xml.etree.ElementTree as ET

PER_TEST_TIMEOUT_SEC = 30


class CheckTimeout(Exception):
    """A single check ran past PER_TEST_TIMEOUT_SEC."""


def _on_alarm(signum, frame):
    raise CheckTimeout(f"check exceeded {PER_TEST_TIMEOUT_SEC} s")


def _clean(text):
    # XML 1.0 forbids most control characters; agent output may contain any byte.
    return "".join(
        c if c in "\t\n\r" or " " <= c <= "\ud7ff" or "\ue000" <= c <= "\ufffd" else "?" for c in text
    )


def _declared_tests(path):
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


def run_file(path):
    """Yield (name, seconds, failure message or None) for each test function ``path`` declares.

    Declared (AST) tests missing after the import yield a failure; tests only the import created
    (not in the source) are not run.
    """
    module_name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - a broken test file must still produce a report
        message = "collection failed: " + "".join(traceback.format_exception_only(type(e), e)).strip()
        for name in _declared_tests(path) or ["collection"]:
            yield name, 0.0, message
        return
    declared = _declared_tests(path)
    found = vars(module)
    for name in declared:
        fn = found.get(name)
        if not callable(fn):
            yield name, 0.0, "declared in the test file but missing after its import (renamed or deleted)"
            continue
        start = time.monotonic()
        signal.alarm(PER_TEST_TIMEOUT_SEC)
        try:
            fn()
            message = None
        except BaseException as e:  # noqa: BLE001 - even SystemExit from the code under test fails the check
            message = "".join(traceback.format_exception_only(type(e), e)).strip() or type(e).__name__
        finally:
            signal.alarm(0)
        yield name, time.monotonic() - start, message


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junitxml", required=True, help="where to write the JUnit XML report")
    parser.add_argument("files", nargs="+", help="pytest-style test files")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGALRM, _on_alarm)
    # the code under test is imported from the working directory, but after the stdlib and site-packages:
    # a module there named like a stdlib one (csv.py) must not replace it for the tests
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)] + [cwd]
    suites = ET.Element("testsuites")
    n_failed = 0
    for path in args.files:
        suite = ET.SubElement(suites, "testsuite", name=os.path.basename(path))
        classname = os.path.splitext(os.path.basename(path))[0]
        for name, seconds, message in run_file(path):
            case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
            status = "PASSED" if message is None else "FAILED"
            print(
                f"{classname}::{name} {status}" + ("" if message is None else f" - {_clean(message)[:200]}")
            )
            if message is not None:
                n_failed += 1
                ET.SubElement(case, "failure", message=_clean(message)[:1000])
    os.makedirs(os.path.dirname(os.path.abspath(args.junitxml)), exist_ok=True)
    ET.ElementTree(suites).write(args.junitxml, encoding="utf-8", xml_declaration=True)
    return 1 if n_failed else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # not sys.exit: atexit hooks or threads the code under test registered must not run after the report
    os._exit(code)
