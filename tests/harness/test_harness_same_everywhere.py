"""RECIPE.md §4: training, probing and evaluation run the same harness, byte for byte."""

import ast
import json
from pathlib import Path

import pytest

import fireflash
from fireflash.config import load_config
from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.agent import run_attempt
from fireflash.protocols import Task, TaskEnvironment

SRC = Path(fireflash.__file__).parent
CALLERS = {"training": "runtime/local.py", "probing": "tasks/probe.py", "evaluation": "evaluation/trials.py"}


def imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


# who calls whom: each link imports the next one down to the harness's single entry point
CHAIN = {
    "runtime/attempts.py": "fireflash.harness.agent.run_attempt",
    "evaluation/trials.py": "fireflash.runtime.attempts.scored_attempt",
}
ENTRY_POINTS = {"fireflash.harness.agent.run_attempt", "fireflash.runtime.attempts.scored_attempt",
                "fireflash.evaluation.trials.run_trials"}


@pytest.mark.unit
def test_every_use_goes_through_run_attempt():
    for module, target in CHAIN.items():
        assert target in imported_names(SRC / module), module
    for use, module in CALLERS.items():
        assert imported_names(SRC / module) & ENTRY_POINTS, f"{use} ({module}) does not reach run_attempt"


@pytest.mark.unit
def test_no_second_prompt_renderer_outside_the_harness():
    offenders = []
    for path in SRC.rglob("*.py"):
        # models.py: the tiny test tokenizer's training corpus spells a tool call; scripted.py: its docstring
        if path.is_relative_to(SRC / "harness") or path.relative_to(SRC).as_posix() in ("models.py", "engines/scripted.py"):
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(SRC)}: {s}" for s in ("apply_chat_template", "<tool_call>") if s in text]
    assert offenders == []


@pytest.mark.sandbox
@pytest.mark.integration
def test_prompts_tool_specs_and_results_are_byte_identical_across_uses(in_sandbox, tiny_tok):
    call = lambda name, **a: "<tool_call>\n" + json.dumps({"name": name, "arguments": a}) + "\n</tool_call>"
    script = [
        call("Write", file_path="/app/x.txt", content="a\r\nb\r\n"),
        call("Edit", file_path="/app/x.txt", old_string="b", new_string="c") + call("Read", file_path="/app/x.txt"),
        call("Bash", command="cat /app/x.txt; head -c 3000 /dev/zero | tr '\\0' y") + call("Nope"),
        "done",
    ]
    # the run config every use loads; the tiny tokenizer spends ~1 token per character, hence larger token budgets
    # the script writes whole calls itself, so the local config's few-shot exchanges and call prefix are off
    overrides = ["harness.sampling.max_new_tokens_per_turn=512", "harness.context_window_tokens=16384",
                 "training.micro_batch_tokens=16384", "harness.few_shot=false", 'harness.assistant_prefix=""']
    cfg = load_config("configs/local.toml", overrides).harness
    task = Task(id="same", instruction="Edit x.", environment=TaskEnvironment(workdir="/app"))
    runs = {use: in_sandbox(lambda sb, use=use: run_attempt(task, sb, ScriptedEngine(tiny_tok, script), tiny_tok, cfg,
                                                             f"{use}-0"))
            for use in CALLERS}
    reference = runs["training"]
    assert reference.status.value == "completed", reference.error
    assert len(reference.messages) == 11
    for use, traj in runs.items():
        assert [m.model_dump() for m in traj.messages] == [m.model_dump() for m in reference.messages], use
        assert traj.segments[0].token_ids == reference.segments[0].token_ids, use
