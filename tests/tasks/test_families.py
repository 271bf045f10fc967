"""Generated task families: deterministic, loadable, never a held-out task, and sound graders in real sandboxes."""

import asyncio
import re

import pytest

from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.tasks.families.catalogue import FAMILIES, ID_PREFIX, generate
from fireflash.tasks.families.writer import write_tasks
from fireflash.curation.gates import validate_task
from fireflash.tasks.loader import bundled_tasks, load_task, load_tasks


def _shape(instruction: str) -> str:
    """An instruction with its names and numbers blanked: what a family would share with a held-out task."""
    text = re.sub(r"`[^`]*`", "`X`", instruction.lower())
    return re.sub(r"\d+", "N", text).strip()


@pytest.mark.unit
def test_generation_is_deterministic_and_ids_are_unique():
    a, b = generate(3, seed=0), generate(3, seed=0)
    assert a == b and len(a) == 3 * len(FAMILIES)
    assert len({task_id for task_id, _ in a}) == len(a) and all(i.startswith(ID_PREFIX) for i, _ in a)
    assert [s.instruction for _, s in generate(3, seed=1)] != [s.instruction for _, s in a]


@pytest.mark.unit
def test_no_generated_task_is_a_heldout_task_with_other_constants():
    heldout = {t.id: _shape(t.instruction) for t in bundled_tasks("heldout")}
    generated = {_shape(s.instruction) for _, s in generate(6, seed=0)}
    assert not [i for i, shape in heldout.items() if shape in generated]
    assert not {t.id for t in bundled_tasks("heldout")} & {i for i, _ in generate(6, seed=0)}


@pytest.mark.unit
def test_generated_source_loads_and_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("FIREFLASH_CACHE", str(tmp_path))
    tasks, errors = load_tasks(["generated:2:5"])
    assert not errors and len(tasks) == 2 * len(FAMILIES)
    first = tasks[0].path / "instruction.md"
    mtime = first.stat().st_mtime_ns
    again, _ = load_tasks(["generated:2:5"])
    assert [t.id for t in again] == [t.id for t in tasks] and first.stat().st_mtime_ns == mtime  # not rewritten
    for bad in ("generated:0", "generated:x", "generated:1:x:tail-lines", "generated:1:2:3:4"):
        _, errors = load_tasks([bad])
        assert errors and "generated:N" in errors[0]


@pytest.mark.unit
def test_generated_sources_with_different_seeds_combine(tmp_path, monkeypatch):
    monkeypatch.setenv("FIREFLASH_CACHE", str(tmp_path))
    tasks, errors = load_tasks(["generated:2:0:tail-lines", "generated:2:2:tail-lines", "generated:2:13:tail-lines"])
    ids = [t.id for t in tasks]
    assert not errors and len(set(ids)) == 6  # same family and index, three seeds: three different tasks
    assert {"gen-tail-lines-0", "gen-tail-lines-s2-0", "gen-tail-lines-s13-1"} <= set(ids)
    assert len({(t.path / "instruction.md").read_text() for t in tasks}) == 6


@pytest.mark.unit
def test_generated_source_filters_families_and_keeps_instance_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("FIREFLASH_CACHE", str(tmp_path))
    full, _ = load_tasks(["generated:2:5"])
    some, errors = load_tasks(["generated:3:5:tail-lines, find-size"])
    assert not errors and sorted(t.id for t in some) == [f"gen-{f}-s5-{k}" for f in ("find-size", "tail-lines")
                                                        for k in range(3)]
    by_id = {t.id: t for t in full}
    for t in some:  # instance k is the same task with or without a filter: probe results carry over
        if t.id in by_id:
            for rel in ("instruction.md", "solution/solve.sh", "tests/test_outputs.py"):
                assert (t.path / rel).read_text() == (by_id[t.id].path / rel).read_text()
    assert sum(t.id.endswith("-2") for t in some) == 2
    _, errors = load_tasks(["generated:1:5:tail-lines,no-such-family"])
    assert errors and "no-such-family" in errors[0] and "known:" in errors[0]
    _, errors = load_tasks(["generated:1:5:"])
    assert errors and "generated:N" in errors[0]


@pytest.mark.unit
def test_instruction_states_every_checked_value(tmp_path):
    # gate 2 reads the checks' compared literals and paths; expectations come from /tests/data, not literals
    paths = write_tasks(1, tmp_path, seed=3)
    reports = [asyncio.run(validate_task(load_task(p), None, GatesConfig(), gates=[2])) for p in paths]
    assert [r.task_id for r in reports if not r.passed] == []


@pytest.mark.unit
def test_stale_directory_is_rewritten(tmp_path):
    paths = write_tasks(1, tmp_path, seed=0)
    (paths[0] / "instruction.md").write_text("tampered\n")
    (tmp_path / "generated.json").write_text("{}")
    write_tasks(1, tmp_path, seed=0)
    assert load_task(paths[0]).instruction != "tampered"


@pytest.mark.unit
def test_a_directory_an_older_layout_wrote_is_rewritten_with_git_installed(tmp_path):
    """Layout 1 wrote git tasks whose images lacked git: their manifests (no "layout") must not be reused."""
    import json

    paths = write_tasks(1, tmp_path, seed=0, families=["git-commit-file"])
    dockerfile = paths[0] / "environment" / "Dockerfile"
    assert "apt-get install -y --no-install-recommends git" in dockerfile.read_text()
    dockerfile.write_text("FROM python:3.11-slim-bookworm\nWORKDIR /app\n")  # what layout 1 wrote, roughly
    manifest = json.loads((tmp_path / "generated.json").read_text())
    del manifest["layout"]
    (tmp_path / "generated.json").write_text(json.dumps(manifest))
    write_tasks(1, tmp_path, seed=0, families=["git-commit-file"])
    assert "apt-get install -y --no-install-recommends git" in dockerfile.read_text()


# tasks validated at once: their sandboxes wait on processes much of the time, so on 2 cores 3 at once take
# about half the time of one by one (gates 1 and 6 have no time limit that contention could break)
CONCURRENT_TASKS = 3


@pytest.fixture(scope="module")
def gate_reports(tmp_path_factory):
    """Gates 1 (the reference solves it) and 6 (do-nothing, empty and placeholder outputs score 0), in bwrap."""
    paths = write_tasks(1, tmp_path_factory.mktemp("generated"), seed=11)

    async def run():
        backend, slots = make_backend(SandboxConfig()), asyncio.Semaphore(CONCURRENT_TASKS)

        async def one(path):
            async with slots:
                return path.name, await validate_task(load_task(path), backend, GatesConfig(), gates=[1, 6])

        try:
            return dict(await asyncio.gather(*(one(p) for p in paths)))
        finally:
            await backend.close()

    return asyncio.run(run())


def test_every_family_is_solved_by_its_reference_and_not_by_doing_nothing(gate_reports):
    failed = {name: [g.detail for g in r.gates if not g.passed] for name, r in gate_reports.items() if not r.passed}
    assert len(gate_reports) == len(FAMILIES) and failed == {}
