"""Path-renaming augmentation: renamed copies of a task, so the model takes file names from the instruction.

    copy_dir = augment_task(task, copy_index=1, out_root=Path("runs/sft/augmented"))  # <id>~r1, or None
    copies = augment_tasks(tasks, copies=3, out_dir=Path("runs/sft/augmented"))        # written once, loaded

With a few dozen tasks, SFT memorises their exact paths and on new tasks writes training file names. A
copy renames what the instruction names in backticked absolute paths under the workdir, deterministically
from (task id, copy index):

- a file name with its extension (``/app/notes.txt`` → ``memo.txt``; a module ``/app/shop/inventory.py``
  also as the dotted import ``shop.inventory``), matched as a whole token: ``notes.txt`` is left alone
  inside ``footnotes.txt``, ``my-notes.txt`` or ``old.notes.txt``;
- the first directory under the workdir (``/app/service/...`` → ``/app/billing/...``), matched where it
  names a path: right after ``/app/`` or ``/tests/data/`` (the pristine copies), after ``./``, or as a
  word not preceded by ``.``, ``/`` or ``-`` (so ``/usr/bin`` and ``self.cache`` stay, while ``"cache"``,
  ``cache/x`` and ``cache.py`` change with it). Outside backticks an instruction changes it only in
  ``/app/D`` paths, so prose that uses the same word ("a small project") reads as before.

The mapping is applied as text to every file of the copy (instruction, task.toml, Dockerfile, app files,
solution, tests and their pristine data) and to the names of files and directories. Never renamed:
``junit_runner.py`` (kept byte-identical), ``test.sh``, ``test_*.py``, ``solve.sh``, ``alt_*.sh``,
``Dockerfile``, ``__init__.py``, hidden names, anything under ``.git``; directory names in ``RESERVED``
(``tests``, ``data``, ``logs``, ...); a module imported other than by its full dotted path (``import X``,
``from P import X``); a directory that an import names anywhere but as its first component, or that a
path names below another directory (``sub/cache``), which the rules would leave behind. The copy's
reference solutions still have to pass its grader: ``fireflash sft`` keeps only oracle trajectories that do.
Turn it on with ``fireflash sft sft.augment_copies=3``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fireflash.protocols import Task
from fireflash.sandbox.config import SandboxConfig
from fireflash.tasks.words import DIR_WORDS, FILE_STEMS, SCRIPT_STEMS

COPY_SEPARATOR = "~r"  # copy k of task T is the task directory (and id) "T~rk"
MANIFEST = "augmented.json"  # what a directory of copies was written for (tasks, copies per task)
PROTECTED = {
    "junit_runner.py", "test.sh", "solve.sh", "Dockerfile", "__init__.py", "instruction.md", "task.toml",
}
RESERVED = {
    "app", "tests", "test", "data", "logs", "log", "tmp", "src", "lib", "etc", "usr", "var", "home", "root",
    "main", "master", "docs", "solution", "environment", "build", "dist", "git", "python", "python3",
}
_BACKTICKED = re.compile(r"`([^`\n]+)`")
_BASENAME = re.compile(r"^[A-Za-z][\w-]*((?:\.[A-Za-z0-9]+)+)$")
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(.+)|import[ \t]+(.+))$", re.MULTILINE)


@dataclass(frozen=True)
class Renaming:
    """One copy's mapping, old → new: file names (with extension), top-level directories, dotted modules."""

    files: dict[str, str]
    dirs: dict[str, str]
    modules: dict[str, str]  # "shop.inventory" → "store.ledger"
    workdir: str

    def _pattern(self, prose: bool) -> tuple[re.Pattern[str], list[str]] | None:
        w = re.escape(self.workdir.rstrip("/"))
        rules = [(rf"(?<![\w.]){re.escape(old)}(?!\w)", new) for old, new in self.modules.items()]
        rules += [(rf"(?<![\w.-]){re.escape(old)}(?![\w-])", new) for old, new in self.files.items()]
        lookbehind = rf"(?<={w}/)" if prose else rf"(?:(?<={w}/)|(?<=/tests/data/)|(?<=\./)|(?<![\w./-]))"
        rules += [(rf"{lookbehind}{old}(?![\w-])", new) for old, new in self.dirs.items()]
        if not rules:
            return None
        pattern = re.compile("|".join(f"(?P<r{i}>{rx})" for i, (rx, _) in enumerate(rules)))
        return pattern, [new for _, new in rules]

    def apply(self, text: str, instruction: bool = False) -> str:
        """``text`` with every mapped name replaced in one pass.

        In an instruction a directory word outside backticks is replaced only in ``/app/D`` paths, so
        prose that uses the same word ("a small project") is left as written.
        """
        if instruction:
            parts = re.split(r"(`[^`\n]+`)", text)
            return "".join(self.apply(p) if i % 2 else self._sub(p, prose=True) for i, p in enumerate(parts))
        return self._sub(text, prose=False)

    def _sub(self, text: str, prose: bool) -> str:
        compiled = self._pattern(prose)
        if compiled is None:
            return text
        pattern, news = compiled
        return pattern.sub(lambda m: news[int(m.lastgroup[1:])], text)

    def rename(self, name: str) -> str:
        """A file or directory name in the copy (protected names and hidden names unchanged)."""
        return name if _protected(name) else self.apply(name)


def _protected(name: str) -> bool:
    return name in PROTECTED or name.startswith(".") or bool(re.fullmatch(r"alt_.*\.sh|test_.*\.py", name))


def _texts(root: Path) -> dict[Path, str]:
    """Relative path → text of every UTF-8 file of the task (binary files, ``.git`` and caches left out)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if not p.is_file() or p.is_symlink() or {".git", "__pycache__"} & set(rel.parts):
            continue
        try:
            out[rel] = p.read_text()
        except UnicodeDecodeError:
            continue
    return out


def _imports(texts: dict[Path, str]) -> list[tuple[list[str], str]]:
    """Every Python import line in the task (heredocs included): (module paths, imported names or '')."""
    found = []
    for text in texts.values():
        for m in _IMPORT.finditer(text):
            if m[1]:
                found.append(([m[1]], m[2]))
            else:
                found.append(([part.split()[0] for part in m[3].split(",") if part.split()], ""))
    return found


def _module_safe(dotted: str, imports: list[tuple[list[str], str]]) -> bool:
    """A module may be renamed when every import naming it uses its full dotted path ``P.X`` (X inside P)."""
    parent, _, stem = dotted.rpartition(".")
    token = re.compile(rf"(?<!\w){re.escape(stem)}(?!\w)")
    for modules, names in imports:
        if not parent and any(m.split(".")[0] == stem for m in modules):
            return False
        if parent and modules == [parent] and token.search(names):
            return False
        elsewhere = [m for m in modules if token.search(m) and m != dotted and not m.startswith(dotted + ".")]
        if parent and elsewhere:
            return False
    return True


def _dir_safe(word: str, workdir: str, texts: dict[Path, str], imports: list[tuple[list[str], str]]) -> bool:
    """A directory may be renamed when every path that names it is one the rules rewrite, and imports name
    it only as the first component of a module path.

    Unsafe: ``x/word`` inside another relative or absolute path (``/srv/word``, ``sub/word``), which the
    text rules leave alone while the directory itself is renamed. A root-level ``/word`` (``#!/bin/sh``) is
    another directory and safe.
    """
    token = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
    for modules, names in imports:
        if token.search(names) or any(token.search(m) and m.split(".")[0] != word for m in modules):
            return False
    nested = re.compile(rf"(?<=[\w.-]/){re.escape(word)}(?![\w-])")
    for text in texts.values():
        for m in nested.finditer(text):
            if not text[: m.start()].endswith((workdir + "/", "/tests/data/", "./")):
                return False
    return True


def _pick(pool: tuple[str, ...], taken: set[str], seed: str, copy_index: int, n: int) -> list[str]:
    """``n`` words for copy ``copy_index``: consecutive slices of one seeded shuffle, so copies differ."""
    order = [w for w in pool if w.lower() not in taken]
    random.Random(seed).shuffle(order)
    start = (copy_index - 1) * n
    return [order[(start + i) % len(order)] for i in range(n)]


def plan_renaming(task: Task, copy_index: int) -> Renaming | None:
    """The names copy ``copy_index`` (1, 2, ...) of ``task`` renames, or None if none can be renamed safely.

    Raises:
        ValueError: ``copy_index < 1`` or the task has no directory.
    """
    if copy_index < 1 or task.path is None:
        raise ValueError(f"task {task.id}: copy_index must be >= 1 and the task needs a directory")
    workdir = task.environment.workdir.rstrip("/")
    texts = _texts(task.path)
    imports = _imports(texts)
    taken = {t.lower() for text in texts.values() for t in re.findall(r"[A-Za-z0-9_]+", text)}
    taken |= {part.lower() for rel in texts for part in re.findall(r"[A-Za-z0-9_]+", rel.as_posix())}
    files: dict[str, list[str]] = {}  # basename → its directory components (for a module's dotted path)
    dirs: list[str] = []
    in_spans = re.compile(rf"(?<![\w./-]){re.escape(workdir)}/([\w./-]+)")
    spans = _BACKTICKED.findall(texts.get(Path("instruction.md"), ""))
    for rel in (m[1].rstrip("/.") for span in spans for m in in_spans.finditer(span)):
        parts = rel.split("/")
        if not all(parts) or any(p.startswith(".") for p in parts):
            continue
        base = _BASENAME.match(parts[-1])
        if base and not _protected(parts[-1]):
            stem, ext = parts[-1][: -len(base[1])], base[1]
            dotted = ".".join(parts[:-1] + [stem])
            importable = all(_WORD.match(p) for p in parts[:-1] + [stem]) and _module_safe(dotted, imports)
            if ext != ".py" or importable:
                files.setdefault(parts[-1], parts[:-1])
        top = parts[0]
        is_dir = len(parts) > 1 or not base
        if is_dir and _WORD.match(top) and top.lower() not in RESERVED and top not in dirs:
            if _dir_safe(top, workdir, texts, imports):
                dirs.append(top)
    if not files and not dirs:
        return None
    seed = f"{task.id}{COPY_SEPARATOR}"
    scripts = [f for f in files if f.endswith((".py", ".sh"))]
    data = [f for f in files if f not in scripts]
    new_files = dict(zip(scripts, _pick(SCRIPT_STEMS, taken, seed + "script", copy_index, len(scripts))))
    new_files |= dict(zip(data, _pick(FILE_STEMS, taken, seed + "file", copy_index, len(data))))
    new_dirs = dict(zip(dirs, _pick(DIR_WORDS, taken, seed + "dir", copy_index, len(dirs))))
    renamed_files = {old: new + _BASENAME.match(old)[1] for old, new in new_files.items()}
    modules = {}
    for old, parents in files.items():
        if old.endswith(".py") and parents:
            stem = old.removesuffix(".py")
            new_parents = [new_dirs.get(p, p) if i == 0 else p for i, p in enumerate(parents)]
            new_stem = renamed_files[old].removesuffix(".py")
            modules[".".join(parents + [stem])] = ".".join(new_parents + [new_stem])
    return Renaming(renamed_files, new_dirs, modules, workdir)


def augment_task(task: Task, copy_index: int, out_root: Path) -> Path | None:
    """Write copy ``copy_index`` of ``task`` to ``out_root/<task id>~r<copy_index>`` (replacing an old one).

    Returns:
        The copy's directory, or None when the instruction names no path that can be renamed safely.
    """
    renaming = plan_renaming(task, copy_index)
    if renaming is None:
        return None
    target = Path(out_root) / f"{task.id}{COPY_SEPARATOR}{copy_index}"
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for dirpath, dirnames, filenames in os.walk(task.path):
        rel = Path(dirpath).relative_to(task.path)
        links = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]  # os.walk does not enter them
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and d not in links]
        verbatim = ".git" in rel.parts
        out_dir = tmp.joinpath(*(p if verbatim else renaming.rename(p) for p in rel.parts))
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in filenames + links:
            src = Path(dirpath) / name
            dst = out_dir / (name if verbatim else renaming.rename(name))
            if src.is_symlink():
                target_text = os.readlink(src)
                os.symlink(target_text if verbatim else renaming.apply(target_text), dst)
                continue
            data = src.read_bytes()
            if not verbatim and name != "junit_runner.py":
                try:
                    text = data.decode()
                except UnicodeDecodeError:
                    pass
                else:
                    is_instruction = rel == Path(".") and name == "instruction.md"
                    data = renaming.apply(text, instruction=is_instruction).encode()
            dst.write_bytes(data)
            shutil.copymode(src, dst)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def augment_tasks(tasks: list[Task], copies: int, out_dir: Path, sandbox: SandboxConfig | None = None,
                  say: Callable[[str], None] = print) -> list[Task]:
    """``copies`` renamed copies of each task under ``out_dir``, loaded; written once and reused on rerun.

    A task with nothing to rename gets no copy; ``copies == 0`` writes nothing and returns []. ``sandbox`` and
    ``say``: as for ``tasks.loader.load_task`` (a copy that runs in its image gets its own, renamed, image).

    Raises:
        fireflash.tasks.TaskLoadError: a copy does not load (a bug in the renaming rules).
        ValueError: ``out_dir`` holds copies written for other tasks or another ``copies``.
    """
    from fireflash.tasks.loader import TaskLoadError, load_tasks

    out_dir = Path(out_dir)
    if copies <= 0:
        return []
    manifest = {"copies": copies, "tasks": sorted(t.id for t in tasks)}
    if not out_dir.is_dir():
        tmp = out_dir.with_name(out_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for task in tasks:
            for k in range(1, copies + 1):
                augment_task(task, k, tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        tmp.rename(out_dir)
    elif not (out_dir / MANIFEST).is_file() or json.loads((out_dir / MANIFEST).read_text()) != manifest:
        raise ValueError(
            f"{out_dir}: written for other tasks or another sft.augment_copies than now ({copies}); "
            f"delete {out_dir} and {out_dir.parent / 'oracle'} to rebuild both, or set sft.run_dir to a new directory"
        )
    loaded, errors = load_tasks([str(out_dir)], sandbox, say)
    if errors:
        raise TaskLoadError(f"{len(errors)} augmented task(s) failed to load:\n" + "\n".join(errors))
    return loaded
