"""Difficulty probing: the keep range's boundaries, expected zero-signal shares, the manifest, and a
probe of bundled tasks with the scripted engine through real sandboxes (RECIPE.md §2)."""

import asyncio
import json
import re

import pytest

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.models import build_tiny_tokenizer
from fireflash.tasks.probe import (
    PoolManifest,
    ProbedTask,
    expected_zero_signal_share,
    keep_task,
    load_pool_manifest,
    probe_tasks,
    read_manifest,
    zero_signal_probability,
)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("passes", "attempts", "kept"),
    [
        (0, 4, False), (1, 4, True), (2, 4, True), (3, 4, True), (4, 4, False),  # the reference's 4 attempts
        (3, 20, True), (17, 20, True),  # exactly 15% and 85%: kept (boundaries are inclusive)
        (2, 20, False), (18, 20, False),  # 10% and 90%: dropped
        (0, 1, False), (1, 1, False),
    ],
)
def test_keep_range_boundaries(passes, attempts, kept):
    assert keep_task(passes, attempts, 0.15, 0.85) is kept


@pytest.mark.unit
def test_keep_range_exact_rates_at_other_boundaries():
    assert keep_task(1, 4, 0.25, 0.75) and keep_task(3, 4, 0.25, 0.75)
    assert not keep_task(1, 4, 0.26, 0.75) and not keep_task(3, 4, 0.25, 0.74)
    with pytest.raises(ValueError, match="passes"):
        keep_task(5, 4, 0.15, 0.85)


@pytest.mark.unit
def test_expected_zero_signal_share_by_hand():
    assert zero_signal_probability(0.0, 12) == 1.0 and zero_signal_probability(1.0, 12) == 1.0
    assert zero_signal_probability(0.5, 2) == pytest.approx(0.5)  # SS, FF of 4 equally likely
    assert zero_signal_probability(0.25, 3) == pytest.approx(0.25**3 + 0.75**3)
    # before filtering 0/4, 2/4, 4/4 with G=4: (1 + 2/16 + 1) / 3; after keeping 2/4 only: 1/8
    assert expected_zero_signal_share([0.0, 0.5, 1.0], 4) == pytest.approx((2 + 0.125) / 3)
    assert expected_zero_signal_share([], 4) is None


@pytest.mark.unit
def test_manifest_load_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="fireflash tasks probe"):
        load_pool_manifest(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text(json.dumps({"model": "m"}))
    with pytest.raises(ValueError, match="bad.json: not a valid pool manifest"):
        load_pool_manifest(tmp_path / "bad.json")
    entry = {"category": "", "attempts": 4, "mean_reward": 0.5, "mean_n_input_tokens": 10.0, "mean_n_output_tokens": 5.0}
    manifest = PoolManifest(model="m", attempts_per_task=4, keep_min_pass_rate=0.15, keep_max_pass_rate=0.85, group_size=12,
                            tasks=[ProbedTask(task_id="a", passes=2, pass_rate=0.5, kept=True, **entry),
                                   ProbedTask(task_id="b", passes=4, pass_rate=1.0, kept=False, **entry)])
    (tmp_path / "m.json").write_text(manifest.model_dump_json())
    assert load_pool_manifest(tmp_path / "m.json") == {"a"}


@pytest.mark.unit
def test_training_pool_is_what_the_manifest_kept(tmp_path):
    """`fireflash train` loads its tasks with load_pool(tasks.paths, tasks.pool_manifest) (runtime/job.py)."""
    from fireflash.tasks.loader import TaskLoadError, load_pool

    entry = {"category": "", "attempts": 4, "mean_reward": 0.5, "mean_n_input_tokens": 10.0, "mean_n_output_tokens": 5.0}

    def manifest(kept: list[str], dropped: list[str]) -> str:
        tasks = [ProbedTask(task_id=t, passes=2, pass_rate=0.5, kept=True, **entry) for t in kept]
        tasks += [ProbedTask(task_id=t, passes=0, pass_rate=0.0, kept=False, **entry) for t in dropped]
        path = tmp_path / f"m{len(kept)}.json"
        path.write_text(PoolManifest(model="m", attempts_per_task=4, keep_min_pass_rate=0.15, keep_max_pass_rate=0.85,
                                     group_size=4, tasks=tasks).model_dump_json())
        return str(path)

    everything = [t.id for t in load_pool(["bundled:heldout"])]
    assert len(everything) == 11
    pool = load_pool(["bundled:heldout"], manifest(["log-top-ips", "text-tail-lines"], ["swe-date-range"]))
    assert sorted(t.id for t in pool) == ["log-top-ips", "text-tail-lines"]
    with pytest.raises(TaskLoadError, match=r"no tasks kept by .*m0\.json"):
        load_pool(["bundled:heldout"], manifest([], everything))


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def scripted(tok, solves):
    """An engine whose attempt t<i> at task T runs T's reference solution iff ``solves[T](i)``, then ends."""
    from fireflash.tasks.loader import load_tasks

    tasks, _ = load_tasks(["bundled:heldout"])
    solution = {t.id: t.solution_path.read_text() for t in tasks}

    def turn(request):
        m = re.match(r"\w+/(.+)/t(\d+)#\d+-turn(\d+)$", request.request_id)
        task_id, index, n = m[1], int(m[2]), int(m[3])
        if task_id not in solves:
            return None  # no turn and no model: ScriptExhausted, an infrastructure failure
        return call("Bash", command=solution[task_id]) if n == 0 and solves[task_id](index) else "Done."

    return ScriptedEngine(tok, turn)


def run_probe(tasks, engine, tok, path, **kw):
    from fireflash.grading.graders import make_grader
    from fireflash.sandbox import make_backend
    from fireflash.sandbox.config import SandboxConfig

    async def main():
        backend = make_backend(SandboxConfig())
        try:
            return await probe_tasks(
                tasks, backend=backend, engine=engine, tokenizer=tok, harness=HarnessConfig(sampling=SamplingConfig(n_top_logprobs=4)),
                grader_for=lambda t: make_grader(t.grader), attempts_per_task=4, keep_min_pass_rate=0.15,
                keep_max_pass_rate=0.85, group_size=4, max_concurrent=4, max_retries=0, manifest_path=path,
                model="scripted", **{"show_progress": False} | kw,
            )
        finally:
            await backend.close()

    return asyncio.run(main())


@pytest.mark.sandbox
@pytest.mark.integration
def test_probe_bundled_tasks_through_sandboxes_and_resume(tmp_path, capsys):
    from fireflash.tasks.loader import load_tasks

    tok = build_tiny_tokenizer()
    tasks = {t.id: t for t in load_tasks(["bundled:heldout"])[0]}
    picked = [tasks["text-line-numbers"], tasks["log-top-ips"], tasks["file-find-large"]]
    solves = {"text-line-numbers": lambda i: True, "log-top-ips": lambda i: i % 2 == 0, "file-find-large": lambda i: False}
    path = tmp_path / "pool.json"
    manifest, unprobed = run_probe(picked, scripted(tok, solves), tok, path, show_progress=True)
    assert unprobed == []
    # output to a pipe gets plain progress lines: at the start, at least every 30 s, at the end (issue #28)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "probe attempts: 0/12, 0 s", lines
    assert lines[-1].startswith("probe attempts: 12/12, ") and " kept; " in lines[-1], lines
    by_id = {t.task_id: t for t in manifest.tasks}
    assert (by_id["text-line-numbers"].passes, by_id["log-top-ips"].passes, by_id["file-find-large"].passes) == (4, 2, 0)
    assert [t.kept for t in manifest.tasks] == [False, True, False]  # sorted: file-find-large, log-top-ips, text-line-numbers
    assert by_id["log-top-ips"].category == "log-analysis" and by_id["log-top-ips"].mean_n_output_tokens > 0
    assert manifest.expected_zero_signal_before == pytest.approx((1 + 0.125 + 1) / 3)
    assert manifest.expected_zero_signal_after == pytest.approx(0.125)
    assert load_pool_manifest(path) == {"log-top-ips"}
    assert read_manifest(path) == manifest

    # rerun with one more task: the probed three are skipped; a task whose attempts are lost is not recorded
    engine = scripted(tok, {"swe-date-range": lambda i: False})
    manifest2, unprobed2 = run_probe(picked + [tasks["swe-date-range"], tasks["csv-group-average"]], engine, tok, path)
    asked = {re.match(r"probe/(.+)/t", r.request_id)[1] for r in engine.requests}
    assert asked == {"swe-date-range", "csv-group-average"}
    assert unprobed2 == ["csv-group-average"]
    assert sorted(t.task_id for t in manifest2.tasks) == ["file-find-large", "log-top-ips", "swe-date-range", "text-line-numbers"]
    assert load_pool_manifest(path) == {"log-top-ips"}


@pytest.mark.sandbox
@pytest.mark.integration
def test_resume_under_another_model_is_refused(tmp_path):
    path = tmp_path / "pool.json"
    path.write_text(PoolManifest(model="other", attempts_per_task=4, keep_min_pass_rate=0.15, keep_max_pass_rate=0.85,
                                 group_size=4, harness=HarnessConfig(sampling=SamplingConfig(n_top_logprobs=4)).model_dump(mode="json")).model_dump_json())
    tok = build_tiny_tokenizer()
    with pytest.raises(ValueError, match="different model"):
        run_probe([], scripted(tok, {}), tok, path)
    path.write_text(PoolManifest(model="scripted", attempts_per_task=4, keep_min_pass_rate=0.15, keep_max_pass_rate=0.85,
                                 group_size=4, harness=HarnessConfig(max_turns=3).model_dump(mode="json")).model_dump_json())
    with pytest.raises(ValueError, match=r"different harness \(\{'max_turns': 3, 'sampling'"):
        run_probe([], scripted(tok, {}), tok, path)


@pytest.mark.sandbox
@pytest.mark.integration
def test_probe_cli_with_tiny_local_model(tmp_path):
    import typer
    from typer.testing import CliRunner

    from fireflash.evaluation.commands import probe_command
    from fireflash.models import build_tiny_model

    model_dir = tmp_path / "tiny"
    tok = build_tiny_tokenizer()
    build_tiny_model(len(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    cli = typer.Typer()
    cli.command()(probe_command)
    task_dir = "src/fireflash/tasks/data/heldout/text-line-numbers"
    result = CliRunner().invoke(cli, [
        task_dir, "--out", str(tmp_path / "pool.json"), f"model.name_or_path={model_dir}", "tasks.probe.attempts_per_task=2",
        "runtime.group_size=4", "harness.sampling.max_new_tokens_per_turn=16", "harness.max_turns=1",
        "harness.sampling.n_top_logprobs=4", "rl.score_centering=false", "runtime.max_inflight_attempts=2", "engine.num_threads=1",
    ])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "pool.json")
    [entry] = manifest.tasks
    # a random tiny model solves nothing: 0/2 is dropped; every group of 4 would carry no signal
    assert (entry.task_id, entry.attempts, entry.passes, entry.kept) == ("text-line-numbers", 2, 0, False)
    assert manifest.expected_zero_signal_before == 1.0 and manifest.expected_zero_signal_after is None
    assert "expected zero-signal groups (G=4): 100.0% before → – after filtering" in " ".join(result.output.split())
    assert "no task to train on: the policy solves none of them" in " ".join(result.output.split())
