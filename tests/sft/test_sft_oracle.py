"""Oracle plans: reference scripts → tool turns in the exact training convention; replayed, graded, kept."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from fireflash.harness.config import HarnessConfig
from fireflash.harness.rendering import ChatRenderer
from fireflash.models import build_tiny_tokenizer
from fireflash.protocols import GenerateRequest, SamplingParams
from fireflash.sft.oracle import (
    OracleError,
    OracleScript,
    ToolTurn,
    index_plans,
    plans_for,
    sampled_text,
    solution_scripts,
    variant_turns,
)
from fireflash.tasks.loader import bundled_tasks

PREFIX = '<tool_call>\n{"name": "'
BACKEND = os.environ.get("FIREFLASH_TEST_SANDBOX", "bwrap")


def _task(tmp_path, solve: str, alts: dict[str, str] | None = None):
    task = next(t for t in bundled_tasks("train") if t.id == "text-head-lines")
    sol = tmp_path / "solution"
    sol.mkdir()
    (sol / "solve.sh").write_text(solve)
    for name, body in (alts or {}).items():
        (sol / name).write_text(body)
    return task.model_copy(update={"solution_path": sol / "solve.sh"})


def test_solution_scripts_strip_only_the_shebang(tmp_path):
    # a '#' line inside a heredoc the script writes is part of the solution (a real oracle bug: it broke
    # shell-count-lines-script, whose solution writes a script with its own shebang)
    body = "cat > /app/x.sh <<'EOF'\n#!/bin/bash\n# keep me\necho hi\nEOF\nchmod +x /app/x.sh"
    task = _task(tmp_path, "#!/bin/bash\n" + body + "\n", {"alt_1.sh": "#!/bin/bash\ntrue\n", "alt_2.sh": "#!/bin/bash\n\n"})
    assert solution_scripts(task) == {"solve.sh": body, "alt_1.sh": "true"}  # an empty alternative is skipped


def test_missing_solution_is_a_clear_error(tmp_path):
    task = _task(tmp_path, "true").model_copy(update={"solution_path": tmp_path / "nope.sh"})
    with pytest.raises(OracleError, match="no reference solution"):
        solution_scripts(task)


def test_variants_and_submit():
    assert [t.name for t in variant_turns("direct", "ls", "/app")] == ["Bash", "Bash"]
    script = variant_turns("script", "echo a", "/w")
    assert script[0] == ToolTurn("Write", {"file_path": "/tmp/solution.sh", "content": "echo a\n"})
    assert script[1].arguments == {"command": "bash /tmp/solution.sh"}
    assert variant_turns("look", "x", "/w")[0].arguments == {"command": "ls -la /w"}
    assert all(v[-1].arguments == {"command": "submit"} for v in (variant_turns(n, "x", "/w") for n in ("direct", "look", "script", "check")))
    with pytest.raises(OracleError, match="unknown variant"):
        variant_turns("guess", "x", "/w")


def test_sampled_text_is_the_templates_own_rendering_after_the_prefix():
    renderer = ChatRenderer(build_tiny_tokenizer())
    turn = ToolTurn("Bash", {"command": 'echo "é" > /app/a'})
    text = '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo \\"é\\" > /app/a"}}\n</tool_call>'
    assert sampled_text(turn, renderer, "") == text
    assert sampled_text(turn, renderer, PREFIX) == text[len(PREFIX):]
    # byte-identical to how the template shows the model an earlier turn making the same call
    shown = renderer.render_text([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                                  {"role": "assistant", "content": "", "tool_calls": [{"name": "Bash", "arguments": turn.arguments}]}],
                                 add_generation_prompt=False)
    assert text + renderer.eos_text in shown
    with pytest.raises(OracleError, match="assistant_prefix"):
        sampled_text(turn, renderer, "Sure!")


def test_oracle_script_maps_request_ids_to_plan_turns():
    tasks = [t for t in bundled_tasks("train") if t.id in ("text-head-lines", "text-uppercase")]
    plans = plans_for(tasks, ["direct", "look"])
    by_task = index_plans(plans)
    assert len(by_task["text-head-lines"]) == 2 * len(solution_scripts(tasks[0]))
    renderer = ChatRenderer(build_tiny_tokenizer())
    script = OracleScript(by_task, renderer, PREFIX)
    params = SamplingParams(max_new_tokens=8)
    req = lambda rid: GenerateRequest(request_id=rid, prompt_ids=[1], params=params)
    plan = by_task["text-head-lines"][1]  # solve.sh, look
    assert script(req("oracle/text-head-lines/t1#2-turn0")) == sampled_text(plan.turns[0], renderer, PREFIX)
    assert script(req("oracle/text-head-lines/t1#1-turn2")) == sampled_text(plan.turns[2], renderer, PREFIX)
    assert script(req("oracle/text-head-lines/t1#1-turn3")) is None
    with pytest.raises(OracleError, match="unexpected request id"):
        script(req("eval-7"))


def test_collect_refuses_duplicate_task_ids_before_replaying_anything():
    from fireflash.sft.collect import collect_oracle

    used = []

    class NoBackend:  # a replay would use the sandbox backend: the check must come first
        def __getattr__(self, name):
            used.append(name)  # recorded: the runtime turns a backend error into a lost attempt, not a failure
            raise RuntimeError(f"backend.{name} used before the duplicate check")

    # replays run in batches by solution count, fewest first: the duplicate sits in the second batch
    tasks = sorted(bundled_tasks("train"), key=lambda t: len(solution_scripts(t)))
    few, many = tasks[0], tasks[-1]
    assert len(solution_scripts(few)) < len(solution_scripts(many))
    with pytest.raises(ValueError, match=f"duplicated: \\['{many.id}'\\]"):
        asyncio.run(collect_oracle([few, many, many], ["direct"], backend=NoBackend(), tokenizer=build_tiny_tokenizer(),
                                   harness=HarnessConfig(assistant_prefix=PREFIX), grader_for=lambda t: None,
                                   max_concurrent=1))
    assert used == []


def test_collect_replays_through_sandboxes_and_keeps_only_solved(tmp_path):
    from fireflash.grading.graders import make_grader
    from fireflash.sandbox import make_backend
    from fireflash.sandbox.config import SandboxConfig
    from fireflash.sft.collect import collect_oracle, load_oracle, save_oracle

    tok = build_tiny_tokenizer()
    good = next(t for t in bundled_tasks("train") if t.id == "text-uppercase")
    broken = _task(tmp_path, "#!/bin/bash\necho wrong > /app/head.txt\n")  # text-head-lines with a wrong "solution"
    harness = HarnessConfig(assistant_prefix=PREFIX, max_turns=6, context_window_tokens=4096, max_total_tokens=8192,
                            sampling={"max_new_tokens_per_turn": 512, "n_top_logprobs": 2})

    async def main():
        backend = make_backend(SandboxConfig(backend=BACKEND))
        try:
            return await collect_oracle([good, broken], ["direct", "script"], backend=backend, tokenizer=tok,
                                        harness=harness, grader_for=lambda t: make_grader(t.grader), max_concurrent=2)
        finally:
            await backend.close()

    result = asyncio.run(main())
    n_good = 2 * len(solution_scripts(good))
    assert len(result.trajectories) == n_good and result.n_plans == n_good + 2
    assert {d["task_id"] for d in result.dropped} == {"text-head-lines"}
    assert all("not passed" in d["reason"] for d in result.dropped)
    for traj in result.trajectories:
        plan = traj.metadata["oracle"]
        seg = traj.segments[0]
        sampled = [i for i, m in zip(seg.token_ids, seg.loss_mask) if m]
        # the policy's tokens are exactly the call texts after the prefix, each closed by eos
        expected = "".join(sampled_text(t, ChatRenderer(tok), PREFIX) + tok.eos_token for t in variant_turns(
            plan["variant"], solution_scripts(good)[plan["solution"]], good.environment.workdir))
        assert tok.decode(sampled) == expected
        assert traj.finish_reason == "submit"
    out = save_oracle(result, tmp_path / "oracle")
    assert len(load_oracle(out)) == n_good
    assert len(json.loads((out / "dropped.json").read_text())) == 2
