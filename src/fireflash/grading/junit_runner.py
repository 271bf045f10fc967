"""A stdlib-only test runner that writes JUnit XML, for sandboxes whose python3 has no pytest.

Tasks ship no copy: their ``test.sh`` runs ``/tests/junit_runner.py``, and the verifier writes this file
there at grading (``grading/verifier.py: list_test_files``), replacing any copy a task ships. It runs the ``test_*``
functions of pytest-style files (plain ``assert``), each with its own time limit, in definition order,
and records every one in the report.

Four roles (issue 27: the report must come from a process the code under test cannot program):

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
- The **test process** runs the checks and never runs the code under test. It imports one test file (from
  the bytes the parent read) with an import system of one finder (``_Finder``): builtin, frozen and
  trusted-path modules (the stdlib, site-packages, the tests' directory) load here; any other module (the
  working directory's code, or a directory the test file put on ``sys.path``) is imported in the agent
  process and appears here as a proxy (``_RemoteModule``): ``from mymodule import f`` gives a reference
  (``_Remote``) whose calls cross a pipe. Arguments and results cross as plain data only (None, bool, int,
  float, str, bytes, list, tuple, dict, set, deque, Counter, OrderedDict, defaultdict of a builtin,
  namedtuple, date/datetime/time/timedelta, Decimal, Fraction, complex, Path: ``_encode``/``_decode``),
  rebuilt here as the real stdlib types; any other object stays in the agent process and comes back as a
  reference, equal only to itself (``in`` iterates it; a check that compares two of the agent's objects
  must compare their attributes). An exception raised there is raised here as its builtin type, or as a local subclass of its
  nearest builtin base with its name (``_exception_type``), so ``except ValueError`` and ``except
  mymodule.MyError`` both work. A call that hangs past the check's limit, dies or answers garbage fails its
  check whatever the check catches (``AgentProcessError``), and the next call starts a fresh agent process.
  It runs not dumpable, with the checks' own limit per check, and sends one outcome each.
- The **agent process** (forked by the test process on the first import it cannot load itself) imports
  the code under test with the working directory *after* the stdlib and site-packages on ``sys.path`` (a
  ``csv.py`` there cannot shadow ``csv``) and answers the test process's requests. It keeps no descriptor
  but its two pipe ends (no outcome pipe) and enters a Landlock domain nested in the test process's.

Under Landlock (ABI 2+) the test process, the agent process and all they start cannot write anything under
the runner's directory (test files, data, ``test.sh``), and neither can ptrace or open ``/proc/PID/{fd,mem}``
of a process outside its own domain (the agent process: the test process; both: the supervisor, the parent
and the shells above them), nor (ABI 6+) signal one.

What the code under test can still do: answer the calls the checks make (it is what they test); make its
own objects say anything when the checks ask them (``str``, ``len``, ``bool``, ``in``, attributes);
change files the checks read afterwards when the checks let it run first; kill its own process (the call
fails). A check that mutates an argument in place (``sort_in_place(xs)``) sees no change: the agent got a
copy; a check cannot pass it a function or its own objects (TypeError). A test file that runs the code
under test itself (``exec``, ``importlib.util.spec_from_file_location``, ``subprocess``) does so by its own
choice. Without Landlock (Linux < 6.12 lacks signal scoping, < 5.19 all of it, which this runner then does
not use) the test process and the agent process can kill the parent (the checks they did not report fail)
or reach the shells above them through ``/proc``; the runner says so on stderr.

    python3 /tests/junit_runner.py --junitxml /logs/verifier/junit.xml /tests/test_outputs.py
"""

import argparse
import ast
import builtins
import collections
import contextlib
import datetime
import functools
import importlib.machinery
import json
import operator
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


# --------------------------------------------------------------------------------------------------------------
# The module under test behind plain data (issue 27). The test process imports the code under test only as a
# proxy: its functions, classes and objects live in a child (the *agent process*), and every call crosses a pipe
# as plain data, rebuilt here as the real stdlib types, so nothing the code under test defines ever runs here.

MAX_FRAME_BYTES = 64 << 20  # one request or answer
MAX_NAME_CHARS = 1000  # a type, module or exception name sent by the agent process
_PLAIN = (bool, int, float, str)
_FACTORIES = {t.__name__: t for t in (int, float, str, list, dict, set, tuple, bytes)}  # a defaultdict's
_BUILTIN_EXCEPTIONS = {
    n: c for n, c in vars(builtins).items() if isinstance(c, type) and issubclass(c, BaseException)
}


class AgentProcessError(BaseException):
    """The code under test's process died, hung, broke the protocol or was stopped: the call (and the check
    that made it) fails. A BaseException, so a check's ``except Exception`` cannot swallow it."""


def _encode(v, to_ref):
    """``v`` as JSON-able plain data: scalars as themselves, containers and stdlib value types as
    ``[tag, ...]`` lists; anything else becomes ``to_ref(v)`` (a reference, or TypeError)."""
    t = type(v)
    if v is None or t in _PLAIN:
        return v
    if isinstance(v, int):  # IntEnum, an int subclass: its value
        return int.__int__(v)
    if isinstance(v, float):
        return float.__float__(v)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, tuple) and hasattr(t, "_fields") and isinstance(t._fields, tuple):  # a namedtuple
        return [
            "namedtuple",
            t.__name__,
            [str(f) for f in t._fields],
            [_encode(x, to_ref) for x in tuple.__iter__(v)],
        ]
    if isinstance(v, (bytes, bytearray)):
        return ["bytes" if isinstance(v, bytes) else "bytearray", bytes(v).decode("latin-1")]
    if isinstance(v, (list, tuple, set, frozenset, collections.deque)):
        tag = next(k for k in ("list", "tuple", "frozenset", "set", "deque") if isinstance(v, _CONTAINERS[k]))
        return [tag, *[_encode(x, to_ref) for x in v]]
    if isinstance(v, dict):
        tag = ["dict"]
        if isinstance(v, collections.Counter):
            tag = ["counter"]
        elif isinstance(v, collections.OrderedDict):
            tag = ["odict"]
        elif isinstance(v, collections.defaultdict):
            factory = v.default_factory
            tag = ["defaultdict", factory.__name__ if factory in _FACTORIES.values() else None]
        return [*tag, *[[_encode(k, to_ref), _encode(x, to_ref)] for k, x in dict.items(v)]]
    if isinstance(v, datetime.datetime):
        return ["datetime", v.isoformat()]
    if isinstance(v, datetime.date):
        return ["date", v.isoformat()]
    if isinstance(v, datetime.time):
        return ["time", v.isoformat()]
    if isinstance(v, datetime.timedelta):
        return ["timedelta", v.days, v.seconds, v.microseconds]
    if isinstance(v, complex):
        return ["complex", v.real, v.imag]
    # types of modules the runner does not import (each costs ~10 ms at start): a value of one exists only
    # if its module was imported
    if isinstance(v, _loaded_type("decimal", "Decimal")):
        return ["decimal", str(v)]
    if isinstance(v, _loaded_type("fractions", "Fraction")):
        return ["fraction", v.numerator, v.denominator]
    if isinstance(v, _loaded_type("pathlib", "PurePath")):
        return ["path", str(v)]
    if isinstance(v, type) and issubclass(v, BaseException) and _BUILTIN_EXCEPTIONS.get(v.__name__) is v:
        return ["exctype", v.__name__]
    if t.__module__ == "numpy" and getattr(v, "ndim", None) == 0 and hasattr(v, "item"):  # np.int64(3): 3
        return _encode(v.item(), to_ref)
    return to_ref(v)


def _loaded_type(module, name):
    """``module.name`` if that module is imported (and done importing), else a type nothing is an instance of."""
    cls = getattr(sys.modules.get(module), name, None)
    return cls if isinstance(cls, type) else _Never


class _Never:
    pass


_CONTAINERS = {"list": list, "tuple": tuple, "frozenset": frozenset, "set": set, "deque": collections.deque}


def _decode(x, from_ref):
    """The inverse of ``_encode``, strict: every value is rebuilt as a real stdlib type (never a class the
    sender chose); ``from_ref(fields)`` rebuilds a reference. Raises ValueError/TypeError on anything else."""
    if x is None or type(x) in _PLAIN:
        return x
    if type(x) is not list or not x or type(x[0]) is not str:
        raise ValueError("not plain data")
    tag, args = x[0], x[1:]
    if tag in _CONTAINERS:
        return _CONTAINERS[tag](_decode(a, from_ref) for a in args)
    if tag in ("dict", "odict", "counter", "defaultdict"):
        factory = None
        if tag == "defaultdict":
            factory, args = args[0], args[1:]
            if factory is not None:
                factory = _FACTORIES[factory]
        pairs = []
        for pair in args:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("not a key-value pair")
            pairs.append((_decode(pair[0], from_ref), _decode(pair[1], from_ref)))
        if tag == "defaultdict":
            return collections.defaultdict(factory, pairs)
        cls = {"dict": dict, "odict": collections.OrderedDict, "counter": collections.Counter}[tag]
        result = cls()
        for k, value in pairs:  # Counter(pairs) would count the pairs
            result[k] = value
        return result
    if tag in ("bytes", "bytearray") and len(args) == 1 and type(args[0]) is str:
        return (bytes if tag == "bytes" else bytearray)(args[0].encode("latin-1"))
    if tag in ("datetime", "date", "time", "decimal", "path") and len(args) == 1 and type(args[0]) is str:
        cls = {"datetime": datetime.datetime, "date": datetime.date, "time": datetime.time}.get(tag)
        if cls is not None:
            return cls.fromisoformat(args[0])
        if tag == "decimal":
            import decimal  # only when one crosses (see _encode)

            return decimal.Decimal(args[0])
        import pathlib

        return pathlib.Path(args[0])
    if tag == "timedelta" and len(args) == 3 and all(type(a) is int for a in args):
        return datetime.timedelta(days=args[0], seconds=args[1], microseconds=args[2])
    if tag == "fraction" and len(args) == 2 and all(type(a) is int for a in args):
        import fractions

        return fractions.Fraction(args[0], args[1])
    if tag == "complex" and len(args) == 2 and all(type(a) in (int, float) for a in args):
        return complex(args[0], args[1])
    if tag == "namedtuple" and len(args) == 3 and type(args[1]) is list and type(args[2]) is list:
        return _namedtuple(args[0], tuple(args[1]))(*[_decode(a, from_ref) for a in args[2]])
    if tag == "exctype" and len(args) == 1 and args[0] in _BUILTIN_EXCEPTIONS:
        return _BUILTIN_EXCEPTIONS[args[0]]
    if tag == "ref":
        return from_ref(args)
    raise ValueError(f"unknown tag {tag!r}")


_NAMEDTUPLES = {}
_EXCEPTION_TYPES = {}


def _namedtuple(name, fields):
    """A namedtuple class made here (not the sender's), one per (name, fields): equal as a tuple, with the
    sender's field names for attribute access."""
    if (name, fields) not in _NAMEDTUPLES:
        if type(name) is not str or len(name) > MAX_NAME_CHARS or not all(type(f) is str for f in fields):
            raise ValueError("bad namedtuple")
        _NAMEDTUPLES[name, fields] = collections.namedtuple(name, fields)
    return _NAMEDTUPLES[name, fields]


def _exception_type(qualname, module, base):
    """A local stand-in for an exception class of the code under test: a subclass of its nearest builtin
    base made here, one per (module, qualname), so ``except ValueError`` and ``except mymodule.MyError``
    both catch what the code under test raised."""
    key = (module, qualname, base)
    if key not in _EXCEPTION_TYPES:
        if (
            not all(type(s) is str and len(s) <= MAX_NAME_CHARS for s in key)
            or base not in _BUILTIN_EXCEPTIONS
        ):
            raise ValueError("bad exception type")
        cls = type(qualname.rpartition(".")[2] or "Error", (_BUILTIN_EXCEPTIONS[base],), {})
        cls.__module__, cls.__qualname__ = module, qualname
        _EXCEPTION_TYPES[key] = cls
    return _EXCEPTION_TYPES[key]


def _write_frame(fd, payload):
    data = struct.pack(">I", len(payload)) + payload
    while data:
        data = data[os.write(fd, data) :]


def _read_exact(fd, n, deadline):
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AgentProcessError("the code under test did not answer in time")
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise AgentProcessError("the code under test's process died")
        buf += chunk
    return bytes(buf)


def _read_frame(fd, deadline):
    (size,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    if size > MAX_FRAME_BYTES:
        raise AgentProcessError(
            f"the code under test sent {size} bytes in one answer (limit {MAX_FRAME_BYTES})"
        )
    return _read_exact(fd, size, deadline)


class _Remote:
    """A reference to an object of the code under test (a function, class, instance, module...).

    Attribute access, calls, items, ``len``, ``bool``, ``str``, ``repr``, iteration and ``isinstance`` are
    forwarded; what comes back is plain data or another reference. Equality and hashing are by identity and
    ``in`` iterates: the code under test cannot decide whether its value equals or contains the expected one,
    not even when the check compares two of its objects (compare their attributes instead)."""

    __slots__ = ("__weakref__", "_ff_agent", "_ff_gen", "_ff_id", "_ff_path", "_ff_type")

    def __init__(self, agent, ref_id, gen, path, type_name):
        fields = {
            "_ff_agent": agent,
            "_ff_id": ref_id,
            "_ff_gen": gen,
            "_ff_path": path,
            "_ff_type": type_name,
        }
        for name, value in fields.items():  # __setattr__ is forwarded to the agent process
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        if name.startswith("_ff_"):
            raise AttributeError(name)
        return self._ff_agent.request("getattr", self, name)

    def __setattr__(self, name, value):
        self._ff_agent.request("setattr", self, name, value)

    def __delattr__(self, name):
        self._ff_agent.request("delattr", self, name)

    def __call__(self, *args, **kwargs):
        return self._ff_agent.request("call", self, list(args), kwargs)

    def __getitem__(self, key):
        return self._ff_agent.request("getitem", self, key)

    def __setitem__(self, key, value):
        self._ff_agent.request("setitem", self, key, value)

    def __delitem__(self, key):
        self._ff_agent.request("delitem", self, key)

    def __len__(self):
        return self._ff_agent.request("len", self, want=int)

    def __bool__(self):
        return self._ff_agent.request("bool", self, want=bool)

    def __str__(self):
        return self._ff_agent.request("str", self, want=str)

    def __repr__(self):
        try:
            return self._ff_agent.request("repr", self, want=str)
        except BaseException:  # noqa: BLE001 - a failure message must still be written
            return f"<{self._ff_type} of the code under test>"

    def __iter__(self):
        it = self._ff_agent.request("iter", self)
        return it if isinstance(it, _Remote) else iter(it)

    def __next__(self):
        return self._ff_agent.request("next", self)

    # no __eq__, __ne__ or __contains__: equality is identity, and ``x in obj`` walks ``iter(obj)``, whose
    # items are plain data the check compares here (a predicate of the agent's, "equal to" or "contains",
    # would let it answer yes to everything)

    def __instancecheck__(self, obj):
        return self._ff_agent.request("isinstance", obj, self, want=bool)

    def __subclasscheck__(self, cls):
        return self._ff_agent.request("issubclass", cls, self, want=bool)

    def __enter__(self):
        return self.__getattr__("__enter__")()

    def __exit__(self, exc_type, exc, tb):
        builtin = exc_type if exc_type in _BUILTIN_EXCEPTIONS.values() else None
        return self.__getattr__("__exit__")(builtin, None, None)


def _unwrap(v):
    return v.__dict__["_ff_remote"] if isinstance(v, _RemoteModule) else v


class _RemoteModule(types.ModuleType):
    """A module of the code under test as the test file sees it: ``from mymodule import f`` gives a
    ``_Remote``. What the import system sets (``__spec__``, submodules) stays here; the rest is forwarded."""

    def __getattr__(self, name):
        if name == "_ff_remote":
            raise AttributeError(name)
        return getattr(self._ff_remote, name)

    def __setattr__(self, name, value):
        if name.startswith("__") or isinstance(value, _RemoteModule) or name == "_ff_remote":
            types.ModuleType.__setattr__(self, name, value)
        else:  # a check setting a module's constant (monkeypatching) sets it where the code runs
            setattr(self._ff_remote, name, value)


class _Agent:
    """The test process's side of the agent process: forks it (before the test file loads, and again on the
    first call after one failed), sends requests, rebuilds answers.

    A call that fails mid-way (the time limit, the process died or sent garbage) kills the process and marks
    the running check failed (``broken``) whatever the check then does; the next call starts a fresh process,
    in which references reached by import and attribute (``mymodule.f``) are looked up again."""

    def __init__(self, setup):
        self.setup = setup
        self.pid = None
        self.gen = 0
        self.seq = 0
        self.broken = None  # why the running check must fail
        self.remotes = {}  # (gen, id) -> _Remote or _RemoteModule, so identity holds across answers

    def start(self):
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(req_w)
                os.close(resp_r)
                _serve(req_r, resp_w, self.setup)
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(resp_w)
        self.pid, self.fds = pid, (req_w, resp_r)
        self.gen += 1

    def stop(self, why):
        if self.pid is not None:
            for fd in self.fds:
                os.close(fd)
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = None
        self.broken = self.broken or why

    def request(self, op, *args, want=None):
        """Send ``op`` with ``args`` (plain data or references); return the answer as plain data or
        references, or raise what the code under test raised (as a builtin exception type or a local
        stand-in, ``_exception_type``). Raises TypeError for an argument that cannot cross, and
        AgentProcessError (the check fails) when the agent process does not answer well in time."""
        if self.pid is None:
            self.start()
        encoded = [_encode(a, self._to_ref) for a in args]
        self.seq += 1
        payload = json.dumps([self.seq, op, *encoded]).encode()
        limit = IMPORT_TIMEOUT_SEC if op in ("import", "resolve") else PER_TEST_TIMEOUT_SEC
        path = None  # how a reference in the answer was reached, to look it up again after a restart
        if op == "getattr" and getattr(_unwrap(args[0]), "_ff_path", None) is not None:
            path = (_unwrap(args[0])._ff_path[0], _unwrap(args[0])._ff_path[1] + (args[1],))
        elif op in ("import", "resolve"):
            path = (args[0], tuple(args[1]) if op == "resolve" else ())
        try:
            _write_frame(self.fds[0], payload)
            answer = json.loads(_read_frame(self.fds[1], time.monotonic() + limit + GRACE_SEC))
            if (
                type(answer) is not list
                or len(answer) != 4
                or type(answer[0]) is not int
                or answer[0] != self.seq
            ):
                raise ValueError("malformed answer")
            _, kind, value, extra = answer
            if type(value) is not list or value[:1] != ["ref"]:
                path = None  # the path names the answer itself, not a reference inside it
            value = _decode(value, lambda fields: self._from_ref(fields, path))
            if kind == "raise":
                error_args = _decode(extra, lambda fields: self._from_ref(fields, None))
                if not (
                    isinstance(value, type) and issubclass(value, BaseException) and type(error_args) is tuple
                ):
                    raise ValueError("malformed exception")
            elif kind != "ok" or (want is not None and type(value) is not want):
                raise ValueError(f"malformed answer to {op}")
        except BaseException as e:  # the time limit, a dead process or garbage: fail closed
            self.stop(f"the call to the code under test failed: {_format(e)[:MESSAGE_CHARS]}")
            if isinstance(e, (CheckTimeout, AgentProcessError)):
                raise
            raise AgentProcessError(self.broken) from None
        if kind == "raise":
            try:
                error = value(*error_args)
            except Exception:  # noqa: BLE001 - arguments the type refuses: keep them as its args
                error = value.__new__(value)
                error.args = error_args
            raise error
        return value

    def _to_ref(self, v):
        v = _unwrap(v)
        if isinstance(v, _Remote) and v._ff_agent is self:
            if v._ff_gen != self.gen:
                self._revive(v)
            return ["ref", v._ff_id]
        raise TypeError(
            f"cannot pass {type(v).__name__} to the code under test: only plain data (None, bool, int, float, "
            "str, bytes, list, tuple, dict, set, datetime, Decimal...) and its own objects cross (issue 27)"
        )

    def _revive(self, v):
        """Point ``v``, a reference into a stopped agent process, at the same object in this one, looked up
        by the path it was reached by (import and attributes); one a call returned is gone with its process."""
        if v._ff_path is None:
            raise AgentProcessError(f"this {v._ff_type} belonged to a stopped process of the code under test")
        fresh = _unwrap(self.request("resolve", v._ff_path[0], list(v._ff_path[1])))
        for name in ("_ff_id", "_ff_gen"):
            object.__setattr__(v, name, getattr(fresh, name))

    def _from_ref(self, fields, path):
        ref_id, kind, type_name, info = fields
        if type(ref_id) is not int or type(type_name) is not str or len(type_name) > MAX_NAME_CHARS:
            raise ValueError("bad reference")
        if kind == "exception":  # a class of the code under test deriving from an exception
            if type(info) is not list or len(info) != 2:
                raise ValueError("bad exception type")
            return _exception_type(type_name, *info)
        if kind not in ("object", "module"):
            raise ValueError("bad reference")
        key = (self.gen, ref_id)
        if key not in self.remotes:
            remote = _Remote(self, ref_id, self.gen, path, type_name)
            if kind == "module":
                module = _RemoteModule(type_name)
                types.ModuleType.__setattr__(module, "_ff_remote", remote)
                module.__dict__["_ff_package"] = info is True
                if info is True:
                    module.__dict__["__path__"] = []  # submodules come through _Finder, never a directory
                remote = module
            self.remotes[key] = remote
        return self.remotes[key]


class _Finder:
    """The test process's only import finder. Builtin, frozen and trusted-path modules (the stdlib,
    site-packages, the tests' own directory) load here; any other name (the working directory's code, or a
    directory a test file put on ``sys.path``) is imported in the agent process and given as a
    ``_RemoteModule``, with its submodules."""

    def __init__(self, agent, trusted_path, test_file):
        self.agent, self.trusted_path, self.test_file = agent, trusted_path, test_file
        self.remote_tops = set()

    def _asked_by_test_file(self):
        """Whether the import being resolved was asked for by the test file itself (an ``import`` there, or
        ``importlib.import_module`` called from there). The stdlib's own optional imports (``ntpath``'s
        ``_winapi``) and site-packages' never reach the agent process: a module the agent planted under such
        a name must not stand in for one a trusted library looks for."""
        frame = sys._getframe(2)
        while frame is not None and (
            frame.f_code.co_filename.startswith("<frozen importlib")
            or frame.f_code.co_filename == importlib.__file__
        ):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename == self.test_file

    def find_spec(self, fullname, path=None, target=None):
        for importer in (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter):
            spec = importer.find_spec(fullname, path)
            if spec is not None:
                return spec
        top = fullname.partition(".")[0]
        if top not in self.remote_tops:
            spec = importlib.machinery.PathFinder.find_spec(
                fullname, path if path is not None else self.trusted_path
            )
            if spec is not None or "." in fullname or not self._asked_by_test_file():
                return spec
        extra = [p for p in sys.path if p not in self.agent.setup.child_path]
        module = self.agent.request("import", fullname, extra)
        if not isinstance(module, _RemoteModule):
            raise AgentProcessError(f"importing {fullname} gave no module")
        self.remote_tops.add(top)
        return importlib.machinery.ModuleSpec(fullname, _Loader(module), is_package=module._ff_package)


class _Loader:
    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass  # it ran in the agent process


def _serve(req_fd, resp_fd, setup):
    """The agent process: import the code under test, answer the test process's requests. Never returns.

    Everything here runs beside the code under test and may be rewritten by it; it can answer anything, and
    the test process rebuilds whatever it sends as plain data. What it cannot do is reach the test process:
    it keeps only its two pipe ends (no outcome pipe) and enters a Landlock domain nested in the test
    process's (no ptrace, ``/proc/PID/{fd,mem}`` or, with ABI 6, signals to it)."""
    keep = {0, 1, 2, req_fd, resp_fd}
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        if int(name) not in keep:
            with contextlib.suppress(OSError):
                os.close(int(name))
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    sys.meta_path[:] = setup.meta_path
    sys.path[:] = setup.child_path
    for name, module in list(sys.modules.items()):
        if isinstance(module, _RemoteModule):
            del sys.modules[name]
    if setup.libc is not None:
        setup.libc.prctl(
            PR_SET_DUMPABLE, 1, 0, 0, 0
        )  # its own /proc entries as usual; the test process stays not
        _enter_landlock(setup.libc, setup.abi, setup.tests_dir)
    objects, ids = {}, {}

    def to_ref(v):
        if id(v) not in ids:
            ids[id(v)] = len(objects)
            objects[len(objects)] = v
        ref_id = ids[id(v)]
        if isinstance(v, types.ModuleType):
            return ["ref", ref_id, "module", str(v.__name__), hasattr(v, "__path__")]
        if isinstance(v, type) and issubclass(v, BaseException):
            base = next(c.__name__ for c in v.__mro__ if _BUILTIN_EXCEPTIONS.get(c.__name__) is c)
            return ["ref", ref_id, "exception", str(v.__qualname__), [str(v.__module__), base]]
        return ["ref", ref_id, "object", type(v).__name__, None]

    def from_ref(fields):
        return objects[fields[0]]

    def iterate(obj):  # a builtin container's iterator comes back as a list; any other is walked by "next"
        it = iter(obj)
        builtin = type(it).__module__ == "builtins" and not isinstance(it, types.GeneratorType)
        return list(it) if it is not obj and builtin else it

    def import_module(name, extra_path):  # directories a test file put on sys.path, after the stdlib here too
        sys.path.extend(p for p in extra_path if type(p) is str and p not in sys.path)
        return importlib.import_module(name)

    ops = {
        "import": import_module,
        "resolve": lambda name, attrs: functools.reduce(getattr, attrs, importlib.import_module(name)),
        "getattr": getattr,
        "setattr": setattr,
        "delattr": delattr,
        "call": lambda f, args, kwargs: f(*args, **kwargs),
        "getitem": operator.getitem,
        "setitem": operator.setitem,
        "delitem": operator.delitem,
        "len": len,
        "bool": bool,
        "str": str,
        "repr": repr,
        "iter": iterate,
        "next": next,
        "isinstance": isinstance,
        "issubclass": issubclass,
    }
    while True:
        try:
            seq, op, *args = json.loads(_read_frame(req_fd, None))
        except AgentProcessError:
            os._exit(0)  # the test process closed its end
        try:
            value = ops[op](*[_decode(a, from_ref) for a in args])
            answer = [seq, "ok", _encode(value, to_ref), None]
        except BaseException as e:  # noqa: BLE001 - all of it goes back to the check
            try:
                extra = _encode(tuple(e.args), to_ref)
            except Exception:  # noqa: BLE001 - arguments that cannot be sent: the message instead
                extra = ["tuple", str(e)]
            answer = [seq, "raise", _encode(type(e), to_ref), extra]
        _write_frame(resp_fd, json.dumps(answer).encode())


def _child(write_fd, path, source, declared, setup):
    """The test process: import ``source`` as ``path``, run ``declared``, send one line each. Never returns."""

    def send(*message):
        os.write(write_fd, json.dumps(message).encode() + b"\n")

    try:
        for sig, handler in setup.dispositions.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        signal.signal(signal.SIGALRM, _on_alarm)
        if setup.libc is not None:  # not dumpable (from the parent): the agent process cannot reach it
            _enter_landlock(setup.libc, setup.abi, setup.tests_dir)
        sys.path[:] = setup.child_path
        # the code under test is imported only through the agent process (cwd is not a trusted path)
        agent = _Agent(setup)
        agent.start()  # now, holding no import lock, with no test code loaded
        sys.meta_path[:] = [_Finder(agent, setup.child_path[:-1], path)]
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
            agent.broken = None
            signal.alarm(PER_TEST_TIMEOUT_SEC)
            try:
                fn()
                message = None
            except BaseException as e:  # noqa: BLE001 - even SystemExit from the code under test fails the check
                message = _format(e)[:MESSAGE_CHARS]
            finally:
                signal.alarm(0)
            if agent.broken is not None:  # a call failed mid-way: fails however the check handled it
                message = agent.broken[:MESSAGE_CHARS]
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
        meta_path=list(sys.meta_path),  # the agent process's import system: the stock one
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
