"""``[tasks.mix]`` (issue 30): its config errors name file, field and fix; the pool loads per source, tagged,
and a source left empty (after loading, or after the probe manifest's filter) is refused by name."""

from __future__ import annotations

import shutil
import tomllib

import pytest

from fireflash.config import ConfigError, build_config, dump_config, load_config
from fireflash.curation.pool import load_mix_pool
from fireflash.curation.probe import PoolManifest, ProbedTask
from fireflash.tasks.loader import DATA_DIR, TaskLoadError

pytestmark = pytest.mark.unit

MIX = """
[tasks.mix]
agentic = { paths = ["bundled:train"], weight = 52 }
swe = { paths = ["runs/swe"], weight = 48 }
"""


def _load(tmp_path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return load_config(path)


def test_a_mix_replaces_tasks_paths_with_its_sources_union_and_survives_the_saved_config(tmp_path):
    cfg = _load(tmp_path, MIX)
    assert cfg.tasks.paths == ["bundled:train", "runs/swe"]  # what probe and eval read
    assert {n: s.weight for n, s in cfg.tasks.mix.items()} == {"agentic": 52, "swe": 48}
    again = build_config(tomllib.loads(dump_config(cfg)))  # run_dir/config.toml holds both: not a second pool
    assert again.tasks == cfg.tasks
    assert load_config(None).tasks.mix == {} and load_config(None).tasks.paths == ["bundled:train"]  # unchanged


@pytest.mark.parametrize("text,error", [
    ('[tasks]\npaths = ["bundled:train"]\n' + MIX,
     "  tasks: tasks.paths (['bundled:train']) and tasks.mix together: with a mix, each source lists its own paths; "
     "remove tasks.paths (or move them into a [tasks.mix] source)"),
    (MIX.replace("weight = 48", "weight = 0"),
     "  tasks.mix.swe.weight = 0: a source's weight must be > 0 (weights are normalised, any sum); remove the "
     "source to leave its tasks out"),
    (MIX.replace("weight = 48", "weight = -1"), "  tasks.mix.swe.weight = -1: a source's weight must be > 0"),
    (MIX.replace('["runs/swe"]', "[]"), "  tasks.mix.swe.paths = []: a task source needs at least one path"),
    (MIX.replace(', weight = 48', ""), "  tasks.mix.swe.weight: required field missing"),
    (MIX.replace("weight = 48", "weight = 48, wieght = 1"), "  tasks.mix.swe.wieght: unknown key; allowed here: "
     "paths, weight"),
    (MIX.replace("swe =", '"swe tasks" ='), "  tasks: tasks.mix source names ['swe tasks']: use letters, digits"),
    (MIX.replace('"runs/swe"', '"bundled:train"'), "  tasks: tasks.mix.agentic.paths and tasks.mix.swe.paths both "
     "list 'bundled:train'; a task belongs to one source: list it once"),
], ids=["with-paths", "zero-weight", "negative-weight", "no-paths", "no-weight", "typo", "bad-name", "shared-path"])
def test_a_bad_mix_names_the_file_the_field_and_the_fix(tmp_path, text, error):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    lines = str(e.value).splitlines()
    assert lines[0] == f"invalid config {tmp_path / 'run.toml'}:"
    assert any(line.startswith(error) for line in lines[1:]), str(e.value)


@pytest.fixture
def sources(tmp_path):
    """Two task directories as a mix's sources: two bundled agentic tasks, and two bundled SWE tasks copied
    into a folder laid out as `fireflash tasks generate swe` writes (a directory of task directories)."""
    agentic, swe = tmp_path / "agentic", tmp_path / "swe"
    for where, names in ((agentic, ["text-count-lines", "text-uppercase"]), (swe, ["swe-slugify", "swe-word-wrap"])):
        for name in names:
            shutil.copytree(DATA_DIR / "train" / name, where / name)
    return {"agentic": [str(agentic)], "swe": [str(swe)]}


def _manifest(tmp_path, kept):
    entry = {"attempts": 4, "pass_rate": 0.5, "kept": True, "passes": 2, "mean_reward": 0.5, "mean_n_input_tokens": 1.0,
             "mean_n_output_tokens": 1.0}
    path = tmp_path / "pool.json"
    path.write_text(PoolManifest(model="m", attempts_per_task=4, keep_min_pass_rate=0.15, keep_max_pass_rate=0.85,
                                 group_size=4, tasks=[ProbedTask(task_id=t, **entry) for t in kept]).model_dump_json())
    return path


def test_the_pool_is_loaded_per_source_and_each_task_tagged(sources, capsys):
    pool = load_mix_pool(sources)
    assert {t.id: t.metadata["source"] for t in pool} == {
        "text-count-lines": "agentic", "text-uppercase": "agentic", "swe-slugify": "swe", "swe-word-wrap": "swe"}


def test_a_source_left_empty_by_the_probe_manifest_is_named(sources, tmp_path, capsys):
    manifest = _manifest(tmp_path, ["text-count-lines", "text-uppercase"])  # probed the agentic tasks only
    with pytest.raises(TaskLoadError) as e:
        load_mix_pool(sources, pool_manifest=manifest)
    assert str(e.value).startswith(f"tasks.mix.swe.paths: no tasks kept by {manifest} under {sources['swe'][0]}: "
                                   "none of its 2 kept ids is there; probe these tasks into it (fireflash tasks probe)")


def test_a_source_with_no_task_or_a_task_in_two_sources_is_named(sources, tmp_path, capsys):
    empty = tmp_path / "generated-but-empty"
    empty.mkdir()
    with pytest.raises(TaskLoadError, match=rf"^tasks.mix.swe.paths: no tasks under {empty}; check tasks.mix.swe.paths"):
        load_mix_pool(sources | {"swe": [str(empty)]})
    with pytest.raises(TaskLoadError, match=r"^tasks.mix.swe.paths: 1 task\(s\) failed to load"):
        load_mix_pool(sources | {"swe": [str(tmp_path / "missing")]})
    shutil.copytree(tmp_path / "agentic" / "text-uppercase", tmp_path / "swe" / "text-uppercase")
    with pytest.raises(TaskLoadError, match=r"task 'text-uppercase' is under both tasks.mix.agentic.paths and "
                                            r"tasks.mix.swe.paths; a task belongs to one source"):
        load_mix_pool(sources)
