"""`fireflash eval` end to end: bundled tasks, the scripted engine, real sandboxes and graders; and the CLI
with a tiny local model (RECIPE.md §6: trials run through the training harness and sandbox)."""

import asyncio
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fireflash.engines.scripted import ScriptedEngine
from fireflash.evaluation.commands import app, split_args
from fireflash.evaluation.cost import TokenPrices
from fireflash.evaluation.results import EvalResults
from fireflash.evaluation.runner import evaluate
from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.protocols import Trajectory

HELDOUT = Path(__file__).resolve().parents[2] / "src" / "fireflash" / "tasks" / "data" / "heldout"
PRICES = TokenPrices(input_usd_per_mtok=1.0, cached_input_usd_per_mtok=0.1, output_usd_per_mtok=4.0, source="config")


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.mark.unit
def test_split_args():
    assert split_args(["bundled:heldout", "runtime.steps=3", "a/b=c", "x.y-z=[1, 2]"]) == (
        ["bundled:heldout", "a/b=c"], ["runtime.steps=3", "x.y-z=[1, 2]"])


@pytest.mark.sandbox
@pytest.mark.integration
def test_eval_bundled_tasks_with_scripted_engine(tmp_path):
    from fireflash.grading.graders import make_grader
    from fireflash.sandbox import make_backend
    from fireflash.sandbox.config import SandboxConfig
    from fireflash.tasks.loader import load_tasks

    tok = build_tiny_tokenizer()
    tasks = [t for t in load_tasks(["bundled:heldout"])[0] if t.id in ("text-line-numbers", "log-top-ips", "swe-date-range")]
    solution = {t.id: t.solution_path.read_text() for t in tasks}
    solves = {"text-line-numbers": lambda i: True, "log-top-ips": lambda i: i == 0}

    def turn(request):
        m = re.match(r"eval/(.+)/t(\d+)#\d+-turn(\d+)$", request.request_id)
        task_id, index, n = m[1], int(m[2]), int(m[3])
        if task_id == "swe-date-range" and index == 2:
            return None  # script exhausted: this trial is lost to "infrastructure"
        return call("Bash", command=solution[task_id]) if n == 0 and solves.get(task_id, lambda i: False)(index) else "Done."

    async def main():
        backend = make_backend(SandboxConfig())
        try:
            return await evaluate(
                tasks, backend=backend, engine=ScriptedEngine(tok, turn), tokenizer=tok,
                harness=HarnessConfig(sampling=SamplingConfig(n_top_logprobs=4)), grader_for=lambda t: make_grader(t.grader),
                trials_per_task=3, ks=[1, 2], prices=PRICES, max_concurrent=3, max_retries=0, out_dir=tmp_path, model="scripted",
            )
        finally:
            await backend.close()

    results = asyncio.run(main())
    by_id = {t.task_id: t for t in results.tasks}
    assert [t.task_id for t in results.tasks] == [t.id for t in tasks]
    assert (by_id["text-line-numbers"].n_solved, by_id["log-top-ips"].n_solved, by_id["swe-date-range"].n_solved) == (3, 1, 0)
    assert by_id["log-top-ips"].pass_at_k == {"1": pytest.approx(1 / 3), "2": pytest.approx(2 / 3)}
    assert by_id["swe-date-range"].n_lost == 1 and by_id["swe-date-range"].n_graded == 2
    assert results.overall.pass_at_k["1"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert "infrastructure:ScriptExhausted" in results.overall.failure_reasons
    assert {c.category for c in results.categories} == {t.metadata["category"] for t in tasks}
    # the engine's prefix-cache hits are counted as cached input: the second turn re-uses the first turn's
    # prompt (identical trials of one task may even find every prompt token cached)
    solved = [t for t in results.trials if t.solved]
    assert all(t.n_turns == 2 and 0 < t.n_cached_input_tokens <= t.n_input_tokens for t in solved)
    for t in results.trials:
        if not t.lost:
            expected = ((t.n_input_tokens - t.n_cached_input_tokens) * 1.0 + t.n_cached_input_tokens * 0.1 + t.n_output_tokens * 4.0) / 1e6
            assert t.cost_usd == pytest.approx(expected)
            assert Trajectory.load(tmp_path / t.trajectory_path).attempt_id == f"{t.attempt_id}#{t.tries}"
    assert EvalResults.load(tmp_path / "results.json") == results
    assert "## Per category" in (tmp_path / "results.md").read_text()


@pytest.mark.sandbox
@pytest.mark.integration
def test_eval_cli_with_tiny_local_model_then_pareto(tmp_path):
    model_dir = tmp_path / "tiny"
    tok = build_tiny_tokenizer()
    build_tiny_model(len(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", str(HELDOUT / "text-line-numbers"), "--model", str(model_dir), "--out", str(out),
        "evaluation.trials_per_task=2", "evaluation.pass_at_k=[1, 2]", "evaluation.setting=tiny",
        "evaluation.prices.input_usd_per_mtok=0.5", "evaluation.prices.output_usd_per_mtok=2.0",
        "harness.sampling.max_new_tokens_per_turn=24", "harness.max_turns=2", "harness.sampling.n_top_logprobs=4",
        "rl.score_centering=false", "runtime.max_inflight_attempts=2", "engine.num_threads=1",
    ])
    assert result.exit_code == 0, result.output
    # output to a pipe gets plain progress lines: at the start, at least every 30 s, at the end (issue #28)
    assert "eval trials: 0/2, 0 s" in result.output and "eval trials: 2/2, " in result.output, result.output
    results = EvalResults.load(out / "results.json")
    assert results.model == str(model_dir) and results.setting == "tiny" and results.overall.n_trials == 2
    assert results.prices.source == "config" and results.engine["kind"] == "local"
    # a random tiny model never solves the task, but every trial is graded and priced
    assert results.overall.n_lost == 0 and results.overall.pass_at_k["1"] == 0.0
    assert results.overall.cost_per_trial_usd > 0 and results.overall.cost_per_solve_usd is None

    csv = tmp_path / "points.csv"
    csv.write_text("name,setting,cost_per_trial_usd,pass_at_1_pct\nother,,1.0,50\n")
    pareto = CliRunner().invoke(app, ["report", "pareto", str(out), "--points", str(csv), "--out", str(tmp_path / "p")])
    assert pareto.exit_code == 0, pareto.output
    assert (tmp_path / "p" / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    table = (tmp_path / "p" / "pareto.md").read_text()
    # ours: 0% at a tiny cost, other: 50% at $1 — neither dominates the other
    assert f"| {model_dir} (ours) | tiny |" in table and table.count("| yes |") == 2


@pytest.mark.unit
def test_eval_cli_unknown_model_exits_2_with_fix(tmp_path):
    result = CliRunner().invoke(app, ["eval", str(HELDOUT / "text-line-numbers"), "--model", str(tmp_path / "nope"),
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "ModelNotFound" in result.output and "model hubs are never contacted" in " ".join(result.output.split())
