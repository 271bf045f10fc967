"""A stdlib-only test runner that writes JUnit XML, for sandboxes whose python3 has no pytest.

Bundled tasks and the gate fixtures ship a byte-identical copy as ``tests/junit_runner.py`` (unit tests
keep the copies in sync; ``tasks/families.py`` copies it into generated tasks). It runs the ``test_*``
functions of pytest-style files (plain ``assert``), each with its own time limit, in definition order,
and records every one in the report.

Three roles (issue 27: the report must come from a process the code under test cannot program):

- The **parent** never imports a test file or the code under test. It reads the test files once, takes
  the checks each declares from their source (AST: module-level ``test_*`` functions) and, per file,
  receives one outcome per check over a pipe. A declared check without a well-formed outcome (the test
  process died, hung past its limit, or reported less) fails: fail closed. It is not dumpable (no ptrace
  or ``/proc/PID/mem`` from the same user) and ignores catchable signals. Before writing it kills every
  process but its ancestors (bwrap sandboxes only, where pid 1 is the sandbox's keeper, as
  ``grading/verifier.py``'s ``KILL_STRAYS``), and fails every check and kills the shell whose test script
  changed during the run (bash reads a script as it goes: a line appended to ``test.sh`` would run after
  the report). It removes whatever the tests left at the report's path, writes the report atomically,
  prints the log after it and leaves with ``os._exit``.
- A **supervisor** per file, forked by the parent, enters a Landlock domain and forks the test process
  into a domain nested in it; once the parent has the outcomes it kills, with one ``kill(-1)`` that the
  domain scopes to the test process and everything it started (ABI 6+), every such process at once: no
  ``setsid`` daemon or fork chain survives to rewrite the report.
- The **test process** imports one test file (from the bytes the parent read) with the working directory
  *after* the stdlib and site-packages on ``sys.path`` (a ``csv.py`` there cannot shadow ``csv``), runs
  the declared checks and sends one outcome each. Under Landlock (ABI 2+) it and all it starts cannot
  write anything under the runner's directory (test files, data, ``test.sh``), nor ptrace or open
  ``/proc/PID/{fd,mem}`` of the parent, the supervisor or the shells above them, nor (ABI 6+) signal them.

Not guaranteed: the code under test runs in the test process with the checks, so it can make them pass
(return an object equal to everything, replace a test function's code, write outcomes into the pipe);
the report then says what the test process said. Without Landlock (Linux < 6.12 lacks signal scoping,
< 5.19 all of it, which this runner then does not use) the test process can kill the parent or reach the
shells above it through ``/proc``; the runner says so on stderr.

    python3 /tests/junit_runner.py --junitxml /logs/verifier/junit.xml /tests/test_outputs.py
"""

import argparse
import ast
import contextlib
import json
import os
import select
import signal
import struct
import sys
import time
import traceback
import types
import xml.etree.ElementTree as ET

try:
    import ctypes
except ImportError:  # a python3 built without libffi: no prctl/Landlock, said in the log
    ctypes = None

PER_TEST_TIMEOUT_SEC = 30
IMPORT_TIMEOUT_SEC = 60  # importing one test file (and the code under test it imports)
GRACE_SEC = 2  # on top of a child's own limits before the parent stops waiting for it
MAX_LINE_BYTES = 64 * 1024  # one outcome message from a child
MESSAGE_CHARS = 4000  # of a failure message, as sent by a child
MAX_SCRIPT_BYTES = 1024 * 1024  # a test script an ancestor shell is reading, kept to compare at the end
KILL_ROUNDS = 200
# signals whose default action would end the parent; a child under Landlock (ABI 6+) cannot send any
KEEP_DEFAULT = {
    signal.SIGKILL,
    signal.SIGSTOP,
    signal.SIGCHLD,
    signal.SIGCONT,
    signal.SIGSEGV,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGTRAP,
    signal.SIGABRT,
    signal.SIGWINCH,
    signal.SIGURG,
}
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every arch
LANDLOCK_RULE_PATH_BENEATH, LANDLOCK_SCOPE_SIGNAL = 1, 1 << 1
# LANDLOCK_ACCESS_FS_*: write a file, remove a directory or file, make any kind of node; then REFER (link or
# rename across directories, ABI 2) and TRUNCATE (ABI 3)
FS_WRITES = sum(1 << bit for bit in range(4, 13)) | 1 << 1
FS_MAKE_BLOCK, FS_REFER, FS_TRUNCATE = 1 << 11, 1 << 13, 1 << 14


class CheckTimeout(Exception):
    """A single check ran past PER_TEST_TIMEOUT_SEC."""


def _on_alarm(signum, frame):
    raise CheckTimeout(f"check exceeded {PER_TEST_TIMEOUT_SEC} s")


def _clean(text):
    # XML 1.0 forbids most control characters; agent output may contain any byte.
    return "".join(
        c if c in "\t\n\r" or " " <= c <= "\ud7ff" or "\ue000" <= c <= "\ufffd" else "?" for c in text
    )


def _declared_tests(source):
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


def _libc():
    return ctypes.CDLL(None, use_errno=True) if ctypes is not None else None


def _landlock_abi(libc):
    """The kernel's Landlock ABI version, 0 without Landlock (or without ctypes)."""
    if libc is None:
        return 0
    return max(0, libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, 1))  # 1: ..._CREATE_RULESET_VERSION


def _enter_landlock(libc, abi, tests_dir):
    """Put this process in a new Landlock domain, nested in its current one. From then on it, and every
    process it starts, cannot write, create, remove or rename anything under ``tests_dir`` (the runner,
    test files, test data, ``test.sh``) and cannot ptrace, open ``/proc/PID/{fd,mem,...}`` of, or (ABI 6+)
    signal a process outside that domain; everywhere else it writes as before. Needs ABI 2 (Linux 5.19):
    under ABI 1 any domain refuses renames across directories. Returns True if it did."""
    if abi < 2:
        return False
    handled = FS_WRITES | FS_REFER | (FS_TRUNCATE if abi >= 3 else 0)
    attr = struct.pack("QQQ", handled, 0, LANDLOCK_SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.c_char_p(attr), ctypes.c_size_t(size), 0)
    if fd < 0:
        return False
    try:
        for path in _writable_dirs(tests_dir):
            try:
                dir_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            rule = struct.pack("=Qi", handled & ~FS_MAKE_BLOCK, dir_fd)  # struct landlock_path_beneath_attr
            libc.syscall(SYS_LANDLOCK_ADD_RULE, fd, LANDLOCK_RULE_PATH_BENEATH, ctypes.c_char_p(rule), 0)
            os.close(dir_fd)
        return (
            libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            and libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0) == 0
        )
    finally:
        os.close(fd)


def _writable_dirs(tests_dir):
    """The directories beside the path from ``/`` down to ``tests_dir``: together they hold everything but
    ``tests_dir`` (and the entries directly in the directories above it)."""
    found, parent = [], "/"
    for part in [p for p in tests_dir.split(os.sep) if p]:
        try:
            names = os.listdir(parent)
        except OSError:
            names = []
        for name in names:
            path = os.path.join(parent, name)
            # a link is left out: it may lead back above tests_dir (pytest's "pytest-current")
            if name != part and os.path.isdir(path) and not os.path.islink(path):
                found.append(path)
        parent = os.path.join(parent, part)
    return found


def _supervise(ctl_fd, write_fd, path, source, declared, setup):
    """The forked supervisor of one test file. Never returns.

    It enters a Landlock domain and forks the test process, which enters a domain nested in it: the test
    process and everything it starts can neither signal nor ptrace the supervisor, while the supervisor's
    ``kill(-1)`` reaches exactly them (with signals scoped, ABI 6+) — atomically, so no fork chain or
    ``setsid`` daemon escapes. It kills once the parent closes ``ctl_fd`` (it has every outcome, or gave up).
    """
    try:
        libc, abi = setup.libc, setup.abi
        scoped = _enter_landlock(libc, abi, setup.tests_dir) and abi >= 6 and not _can_signal(os.getppid())
        pid = os.fork()
        if pid == 0:
            os.close(ctl_fd)
            _child(write_fd, path, source, declared, setup)
        os.close(write_fd)
        os.read(ctl_fd, 1)  # blocks until the parent closes its end (or dies)
        for target in (-1, pid) if scoped else (pid,):
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        os.waitpid(pid, 0)
    finally:
        os._exit(0)


def _can_signal(pid):
    """Whether this process may signal ``pid``: before ``kill(-1)``, proof that the scope holds (else it
    would reach every process of the user)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False
    except ProcessLookupError:
        return True  # cannot tell
    return True


def _child(write_fd, path, source, declared, setup):
    """The test process: import ``source`` as ``path``, run ``declared``, send one line each. Never returns."""

    def send(*message):
        os.write(write_fd, json.dumps(message).encode() + b"\n")

    try:
        for sig, handler in setup.dispositions.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        signal.signal(signal.SIGALRM, _on_alarm)
        if setup.libc is not None:
            setup.libc.prctl(
                PR_SET_DUMPABLE, 1, 0, 0, 0
            )  # its own /proc entries as usual; the parent stays not
            _enter_landlock(setup.libc, setup.abi, setup.tests_dir)
        sys.path[:] = setup.child_path
        module_name = os.path.splitext(os.path.basename(path))[0]
        module = type(sys)(module_name)
        module.__file__ = path
        sys.modules[module_name] = module
        try:
            exec(compile(source, path, "exec", dont_inherit=True), vars(module))  # noqa: S102 - the test file
        except BaseException as e:  # noqa: BLE001 - a broken test file must still produce a report
            send("collection", "collection failed: " + _format(e)[:MESSAGE_CHARS])
            return
        send("imported")
        for index, name in enumerate(declared):
            fn = vars(module).get(name)
            if not callable(fn):
                send(
                    "case",
                    index,
                    0.0,
                    "declared in the test file but missing after its import (renamed or deleted)",
                )
                continue
            start = time.monotonic()
            signal.alarm(PER_TEST_TIMEOUT_SEC)
            try:
                fn()
                message = None
            except BaseException as e:  # noqa: BLE001 - even SystemExit from the code under test fails the check
                message = _format(e)[:MESSAGE_CHARS]
            finally:
                signal.alarm(0)
            send("case", index, time.monotonic() - start, message)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # the code under test may have replaced or closed them
                stream.flush()
        os._exit(0)


def _format(e):
    return "".join(traceback.format_exception_only(type(e), e)).strip() or type(e).__name__


def run_file(path, source, declared, setup):
    """Run ``declared`` from ``source`` in a supervised test process.

    Returns:
        (one (seconds, message or None) per declared check, the import's error message or None). A check
        the test process gave no well-formed outcome for, in time, fails.
    """
    outcomes = [None] * len(declared)
    ctl_read, ctl_write = os.pipe()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ctl_write)
        os.close(read_fd)
        _supervise(ctl_read, write_fd, path, source, declared, setup)
    os.close(ctl_read)
    os.close(write_fd)
    missing = "no outcome from the test process (it died, hung or stopped reporting)"
    collection = None
    imported = False
    buffer = b""
    deadline = time.monotonic() + IMPORT_TIMEOUT_SEC + PER_TEST_TIMEOUT_SEC + GRACE_SEC
    try:
        while None in outcomes or not (declared or imported):  # with none declared, until the import is done
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_fd], [], [], left)[0]:
                missing = "timed out: no outcome from the test process in time"
                break
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if len(buffer) > MAX_LINE_BYTES:
                missing = "the test process sent a malformed outcome"
                break
            for line in lines:
                kind, fields = _parse(line)
                if kind == "collection":
                    missing = collection = fields
                elif kind == "imported":
                    imported = True
                elif kind == "case" and fields[0] < len(outcomes) and outcomes[fields[0]] is None:
                    outcomes[fields[0]] = fields[1:]
                deadline = time.monotonic() + PER_TEST_TIMEOUT_SEC + GRACE_SEC
    finally:
        os.close(read_fd)
        os.close(ctl_write)  # the supervisor now kills the test process and all it started
        _reap(pid, time.monotonic() + GRACE_SEC)
    return [o or (0.0, missing) for o in outcomes], collection


def _parse(line):
    """A child's line → ('imported', None) | ('collection', message) | ('case', (index, seconds, message)) |
    ('', None)."""
    try:
        message = json.loads(line)
        kind = message[0]
        if kind == "imported":
            return kind, None
        if kind == "collection" and isinstance(message[1], str):
            return kind, message[1]
        if kind == "case":
            index, seconds, text = message[1:]
            well_formed = type(index) is int and index >= 0 and type(seconds) in (int, float)
            if well_formed and (text is None or isinstance(text, str)):
                return kind, (index, max(0.0, min(float(seconds), 1e6)), text)
    except Exception:  # noqa: BLE001, S110 - any line a child sends, e.g. nested past the recursion limit
        pass
    return "", None


def _reap(pid, deadline):
    """Wait for the supervisor ``pid`` until ``deadline`` (monotonic seconds), then kill it."""
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            return
        time.sleep(0.001)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _proc_stat(pid):
    """(state, ppid) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return fields[0].decode(), int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def _ancestors():
    """This process and every process above it, up to pid 1."""
    chain, pid = [], os.getpid()
    while pid > 0 and pid not in chain:
        chain.append(pid)
        stat = _proc_stat(pid)
        pid = stat[1] if stat else 0
    return chain


def _in_bwrap_sandbox():
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return b"FF_CTL_FD" in f.read()
    except OSError:
        return False


def _kill_strays(keep):
    """SIGKILL every live process but ``keep`` and pid 1, until none is left. Returns False if some kept coming."""
    for _ in range(KILL_ROUNDS):
        victims = []
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in keep and int(name) != 1:
                stat = _proc_stat(int(name))
                if stat is not None and stat[0] not in ("Z", "X"):
                    victims.append(int(name))
        if not victims:
            return True
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        while True:  # reap our own children (they would linger as zombies otherwise)
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.002)
    return False


def _scripts(ancestors, tests_dir):
    """{(pid, fd): content} of the files in ``tests_dir`` the ancestor shells hold open for reading (``test.sh``)."""
    found = {}
    for pid in ancestors[1:]:
        if pid == 1:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags = int(next(ln for ln in f if ln.startswith("flags:")).split()[1], 8)
                if flags & os.O_ACCMODE != os.O_RDONLY:
                    continue
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith(tests_dir + os.sep):
                    continue
                if not os.path.isfile(f"/proc/{pid}/fd/{fd}"):  # never open a FIFO: it would block
                    continue
                with open(f"/proc/{pid}/fd/{fd}", "rb") as f:
                    data = f.read(MAX_SCRIPT_BYTES + 1)
                if len(data) <= MAX_SCRIPT_BYTES:
                    found[(pid, fd)] = data
            except (OSError, StopIteration, ValueError, IndexError):
                continue
    return found


def _changed_scripts(before):
    changed = []
    for (pid, fd), data in before.items():
        try:
            with open(f"/proc/{pid}/fd/{fd}", "rb") as f:
                now = f.read(MAX_SCRIPT_BYTES + 1)
        except OSError:
            continue  # the shell closed it: it reads no more of it
        if now != data:
            changed.append(pid)
    return changed


def _harden(libc):
    """Make the parent unreachable from the same user: not dumpable, catchable signals ignored.

    Returns the signal dispositions it replaced, for the children to restore.
    """
    dispositions = {}
    if libc is None or libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print("junit_runner: cannot make the runner undumpable (no ctypes or prctl)", file=sys.stderr)
    # valid_signals is Python 3.8+; an image's older python3 gets every number below NSIG
    for sig in getattr(signal, "valid_signals", lambda: range(1, signal.NSIG))():
        if sig not in KEEP_DEFAULT:
            try:
                dispositions[sig] = signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError):
                pass
    return dispositions


def _write_report(path, suites):
    """Replace ``path`` with the report, atomically. Whatever was at ``path`` (a report the tests planted)
    is removed first, so a report that cannot be written (a full disk) leaves none rather than theirs."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    if not os.access(directory, os.W_OK | os.X_OK):  # the tests made it read-only (it is their user's)
        os.chmod(directory, os.stat(directory).st_mode & 0o7777 | 0o700)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            ET.ElementTree(suites).write(f, encoding="utf-8", xml_declaration=True)
        os.replace(tmp, path)  # replaces a symlink planted at ``path`` rather than writing through it
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv=None):
    global PER_TEST_TIMEOUT_SEC  # a script's setting, read by the forked processes
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junitxml", required=True, help="where to write the JUnit XML report")
    parser.add_argument("files", nargs="+", help="pytest-style test files")
    parser.add_argument("--timeout-sec", type=int, default=PER_TEST_TIMEOUT_SEC, help="limit of one check")
    args = parser.parse_args(argv)
    PER_TEST_TIMEOUT_SEC = args.timeout_sec
    libc = _libc()
    abi = _landlock_abi(libc)
    if abi < 6:
        print(
            f"junit_runner: Landlock ABI {abi} (< 6): the tests' processes are not confined", file=sys.stderr
        )
    here = os.path.dirname(os.path.abspath(__file__))
    cwd = os.getcwd()
    setup = types.SimpleNamespace(
        libc=libc,
        abi=abi,
        dispositions=_harden(libc),
        tests_dir=here,  # the runner's own directory: test files, data and test.sh (/tests)
        # the code under test is imported from the working directory, but after the stdlib and
        # site-packages: a module there named like a stdlib one (csv.py) must not replace it for the tests
        child_path=[p for p in sys.path if p not in ("", ".", cwd)] + [cwd],
    )
    # the parent imports nothing more from here on; the tests directory (sys.path[0]) is agent-writable
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd, here)]
    sources = []
    for path in args.files:
        try:
            with open(path, "rb") as f:
                sources.append(f.read())
        except OSError as e:
            sources.append(e)
    ancestors = _ancestors()
    scripts = _scripts(ancestors, here)
    results = []  # (path, [(name, seconds, message)])
    for path, source in zip(args.files, sources):
        if isinstance(source, OSError):
            results.append((path, [("collection", 0.0, f"collection failed: cannot read {path}: {source}")]))
            continue
        declared = _declared_tests(source)
        try:
            outcomes, collection = run_file(path, source, declared, setup)
        except Exception as e:  # noqa: BLE001 - e.g. no fork left (the tests used up the pids): they fail
            error = f"runner error: {e!r}"
            outcomes, collection = [(0.0, error)] * len(declared), error
        cases = [(name, *o) for name, o in zip(declared, outcomes)]
        results.append((path, cases or ([("collection", 0.0, collection)] if collection else [])))
    if _in_bwrap_sandbox() and not _kill_strays(set(ancestors)):
        results = _fail_all(results, "processes the tests started could not be stopped")
    tampered = _changed_scripts(scripts)
    if tampered:
        results = _fail_all(results, "the test script changed while the tests ran")
    suites = ET.Element("testsuites")
    lines = []
    for path, cases in results:
        suite = ET.SubElement(suites, "testsuite", name=os.path.basename(path))
        classname = os.path.splitext(os.path.basename(path))[0]
        for name, seconds, message in cases:
            case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
            if message is None:
                lines.append(f"{classname}::{name} PASSED")
            else:
                lines.append(f"{classname}::{name} FAILED - {_clean(message)[:200]}")
                ET.SubElement(case, "failure", message=_clean(message)[:1000])
    try:
        _write_report(args.junitxml, suites)
    finally:
        for pid in tampered:  # the shell must not read on into lines appended to its script
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:  # after the report: the log may be unwritable (the tests filled its disk)
        print("\n".join(lines), flush=True)
    except OSError:
        pass
    return 1 if any(message is not None for _, cases in results for _, _, message in cases) else 0


def _fail_all(results, message):
    return [(path, [(name, seconds, message) for name, seconds, _ in cases]) for path, cases in results]


if __name__ == "__main__":
    # not sys.exit: nothing the code under test registered runs after the report is written
    os._exit(main())
