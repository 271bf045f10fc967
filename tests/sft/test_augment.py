"""Path-renaming augmentation (fireflash.sft.augment): renamed copies of bundled tasks stay solvable."""

from __future__ import annotations

import asyncio
import builtins
import keyword
import os
import re
import sys
from pathlib import Path

import pytest

from fireflash.sft.augment import (
    DIR_WORDS,
    FILE_STEMS,
    RESERVED,
    SCRIPT_STEMS,
    Renaming,
    augment_task,
    plan_renaming,
)
from fireflash.cli.sft import HeldoutLeak, sft_tasks
from fireflash.sft.config import SFTConfig
from fireflash.tasks.loader import DATA_DIR, load_task
from fireflash.curation.requirements import unstated_requirements

TRAIN = DATA_DIR / "train"
BACKEND = os.environ.get("FIREFLASH_TEST_SANDBOX", "bwrap")
STATED = {  # task → the file names its instruction states in absolute paths
    "text-head-lines": {"notes.txt", "head.txt"},
    "log-status-counts": {"access.log", "status_counts.txt"},
}


def _texts(root: Path, *subdirs: str) -> dict[str, str]:
    paths = [root / "instruction.md"] + [p for s in subdirs for p in sorted((root / s).rglob("*"))]
    keep = [p for p in paths if p.is_file() and p.name != "junit_runner.py"]
    return {str(p.relative_to(root)): p.read_text() for p in keep}


def _occurs(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


@pytest.mark.parametrize("name", sorted(STATED))
def test_copy_renames_every_stated_file(tmp_path, name):
    task = load_task(TRAIN / name)
    renaming = plan_renaming(task, 1)
    assert set(renaming.files) == STATED[name] and not renaming.dirs
    copy = load_task(augment_task(task, 1, tmp_path))
    assert copy.id == f"{name}~r1" and copy.path == tmp_path / f"{name}~r1"
    for where, text in _texts(copy.path, "solution", "tests", "environment").items():
        assert not [old for old in renaming.files if _occurs(old, text)], where
    for sub in ("environment/app", "tests/data"):  # inputs moved under their new names, bytes unchanged
        for original in (task.path / sub).iterdir():
            moved = copy.path / sub / renaming.files.get(original.name, original.name)
            assert moved.read_bytes() == original.read_bytes()
    for script in ("solve.sh", "alt_1.sh"):  # reads the renamed input, writes the renamed output
        body = (copy.path / "solution" / script).read_text()
        assert all(f"/app/{new}" in body for new in renaming.files.values())
    assert unstated_requirements(copy.grader.tests_dir, copy.instruction, copy.environment.workdir) == []


def test_module_and_package_renamed_together(tmp_path):
    task = load_task(TRAIN / "swe-inventory-stock")
    renaming = plan_renaming(task, 2)
    package, module = renaming.dirs["shop"], renaming.files["inventory.py"].removesuffix(".py")
    copy = load_task(augment_task(task, 2, tmp_path))
    assert (copy.path / "environment/app" / package / f"{module}.py").is_file()
    assert f"from {package}.{module} import Inventory" in (copy.path / "tests/test_fix.py").read_text()
    assert f"`/app/{package}/{module}.py`" in copy.instruction
    assert copy.grader.fail_to_pass == task.grader.fail_to_pass  # test ids are not renamed


def test_whole_tokens_only():
    files = Renaming({"notes.txt": "memo.txt"}, {}, {}, "/app")
    text = "footnotes.txt my-notes.txt old.notes.txt notes.txt /app/notes.txt 'notes.txt' notes.txt.bak"
    assert files.apply(text) == (
        "footnotes.txt my-notes.txt old.notes.txt memo.txt /app/memo.txt 'memo.txt' memo.txt.bak")
    dirs = Renaming({}, {"bin": "tools"}, {}, "/app")
    assert dirs.apply("#!/usr/bin/env /app/bin/x ./bin/y bin/z self.bin \"bin\" binary") == (
        "#!/usr/bin/env /app/tools/x ./tools/y tools/z self.bin \"tools\" binary")
    prose = "Put the bin in `/app/bin`, see `bin`; the bin stays /app/bin."
    assert dirs.apply(prose, instruction=True) == (
        "Put the bin in `/app/tools`, see `tools`; the bin stays /app/tools.")


def test_footnotes_survive_in_a_copy(tmp_path):
    src = tmp_path / "notes-task"
    for rel, text in {
        "instruction.md": "Copy `/app/notes.txt` to `/app/out.txt`.",
        "task.toml": "[verifier]\ntimeout_sec = 10.0\n",
        "environment/Dockerfile": "FROM python:3.11-slim-bookworm\nWORKDIR /app\nCOPY app/ /app/\n",
        "environment/app/notes.txt": "see footnotes.txt\n",
        "environment/app/footnotes.txt": "unlike notes.txt\n",
        "solution/solve.sh": "#!/bin/bash\ncp /app/notes.txt /app/out.txt\n",
        "tests/test.sh": "#!/bin/bash\ncmp /app/out.txt /app/notes.txt && test -f /app/footnotes.txt\n",
    }.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    task = load_task(src)
    renaming = plan_renaming(task, 1)
    assert sorted(renaming.files) == ["notes.txt", "out.txt"]
    new, out = renaming.files["notes.txt"], renaming.files["out.txt"]
    copy = augment_task(task, 1, tmp_path / "out")
    app = copy / "environment/app"
    assert sorted(p.name for p in app.iterdir()) == sorted(["footnotes.txt", new])
    assert (app / new).read_text() == "see footnotes.txt\n"
    assert (app / "footnotes.txt").read_text() == f"unlike {new}\n"
    test_sh = (copy / "tests/test.sh").read_text()
    assert test_sh.endswith(f"cmp /app/{out} /app/{new} && test -f /app/footnotes.txt\n")


def test_names_are_deterministic_and_differ_between_copies():
    task = load_task(TRAIN / "log-status-counts")
    assert plan_renaming(task, 1) == plan_renaming(task, 1)
    news = [set(plan_renaming(task, k).files.values()) for k in (1, 2, 3)]
    assert all(not (news[i] & news[j]) for i in range(3) for j in range(i + 1, 3))
    assert plan_renaming(load_task(TRAIN / "shell-env-file"), 1) is None  # only `/app/.env`: nothing to do


def test_word_pools_are_safe_names():
    pools = [set(FILE_STEMS), set(SCRIPT_STEMS), set(DIR_WORDS)]
    assert sum(map(len, pools)) == len(set.union(*pools))  # disjoint, no duplicates
    unsafe = set(sys.stdlib_module_names) | set(dir(builtins)) | set(keyword.kwlist) | RESERVED
    assert all(w.isidentifier() and w not in unsafe for pool in pools for w in pool)


def test_no_copies_by_default(tmp_path):
    assert SFTConfig().augment_copies == 0
    tasks, copies = sft_tasks(SFTConfig(tasks=[str(TRAIN / "text-head-lines")]), tmp_path)
    assert [t.id for t in tasks] == ["text-head-lines"] and copies == []
    assert not (tmp_path / "augmented").exists()


def test_copies_written_once_and_reused(tmp_path):
    s = SFTConfig(tasks=[str(TRAIN / "text-head-lines"), str(TRAIN / "shell-env-file")], augment_copies=2)
    tasks, copies = sft_tasks(s, tmp_path)
    assert [t.id for t in tasks] == ["text-head-lines", "shell-env-file"]
    assert [c.id for c in copies] == ["text-head-lines~r1", "text-head-lines~r2"]
    marker = copies[0].path / "instruction.md"
    marker.write_text(marker.read_text() + "\n")
    _, again = sft_tasks(s, tmp_path)
    assert [c.id for c in again] == [c.id for c in copies] and marker.read_text().endswith("\n\n")


def test_generated_tasks_are_not_copied(tmp_path, monkeypatch):
    monkeypatch.setenv("FIREFLASH_CACHE", str(tmp_path / "cache"))
    s = SFTConfig(tasks=[str(TRAIN / "text-head-lines"), "generated:1"], augment_copies=1)
    tasks, copies = sft_tasks(s, tmp_path)
    assert len(tasks) > 1 and [c.id for c in copies] == ["text-head-lines~r1"]


def test_heldout_refused_before_any_copy(tmp_path):
    s = SFTConfig(tasks=[str(DATA_DIR / "heldout" / "text-tail-lines")], augment_copies=1)
    with pytest.raises(HeldoutLeak):
        sft_tasks(s, tmp_path)
    assert not (tmp_path / "augmented").exists()


@pytest.mark.sandbox
@pytest.mark.parametrize("name", [*sorted(STATED), "swe-inventory-stock"])
def test_renamed_reference_solutions_pass(tmp_path, name):
    from fireflash.sandbox import SandboxConfig, make_backend
    from fireflash.tasks.config import GatesConfig
    from fireflash.curation.gates import validate_task

    copy = load_task(augment_task(load_task(TRAIN / name), 3, tmp_path))

    async def gates():
        backend = make_backend(SandboxConfig(backend=BACKEND))
        try:  # 1: solve.sh passes the copy's grader, 2: what the tests check is stated, 7: alt_*.sh pass
            return await validate_task(copy, backend, GatesConfig(), gates=[1, 2, 7])
        finally:
            await backend.close()

    report = asyncio.run(gates())
    assert report.passed, [g.detail for g in report.gates if not g.passed]


def test_copies_for_another_count_are_refused_not_reused(tmp_path):
    s = SFTConfig(tasks=[str(TRAIN / "text-head-lines")], augment_copies=2)
    sft_tasks(s, tmp_path)
    with pytest.raises(ValueError, match="augment_copies"):
        sft_tasks(s.model_copy(update={"augment_copies": 3}), tmp_path)
