"""RECIPE.md §4: training, probing and evaluation run the same harness, byte for byte.

The byte-identity test drives the three real entry points — ``LocalRuntime`` (``fireflash train``),
``probe_tasks`` (``fireflash tasks probe``) and ``evaluate`` (``fireflash eval``) — on one bundled task
through real sandboxes, each with its own scripted engine playing the same conversation, and compares
every request of each path's first attempt: prompt ids (system prompt, tool specs, tool results) and
sampling params. A static check covers the CLI glue above those entry points.
"""

import ast
import asyncio
import json
import os
from pathlib import Path

import pytest

import fireflash
from fireflash.config import load_config
from fireflash.engines.scripted import ScriptedEngine
from fireflash.grading import make_grader
from fireflash.harness.prompt import system_prompt
from fireflash.harness.rendering import ChatRenderer
from fireflash.harness.specs import TOOL_SPECS
from fireflash.sandbox import make_backend

SRC = Path(fireflash.__file__).parent
CONFIG = Path(__file__).parents[2] / "configs" / "local.toml"
TASK_DIR = SRC / "tasks" / "data" / "train" / "text-count-lines"
CALLERS = {"training": "runtime/local.py", "probing": "curation/probe.py", "evaluation": "rollout/trials.py"}


def imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


# who calls whom: each link imports the next one down to the harness's single entry point
CHAIN = {
    "rollout/attempts.py": "fireflash.harness.agent.run_attempt",
    "rollout/trials.py": "fireflash.rollout.attempts.scored_attempt",
}
ENTRY_POINTS = {"fireflash.harness.agent.run_attempt", "fireflash.rollout.attempts.scored_attempt",
                "fireflash.rollout.trials.run_trials"}


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


# the CLI functions above the entry points the byte-identity test drives: each hands over cfg.harness untouched
CLI_CALL_SITES = [("cli/train.py", "_train", "LocalRuntime"), ("cli/evaluation.py", "eval_command", "evaluate"),
                  ("cli/evaluation.py", "probe_command", "probe_tasks")]


@pytest.mark.unit
def test_cli_commands_pass_the_loaded_harness_config_unchanged():
    for module, function, callee in CLI_CALL_SITES:
        tree = ast.parse((SRC / module).read_text())
        body = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef) and n.name == function)
        calls = [n for n in ast.walk(body) if isinstance(n, ast.Call) and ast.unparse(n.func) == callee]
        assert len(calls) == 1, f"{function} should call {callee} once"
        harness = [ast.unparse(k.value) for k in calls[0].keywords if k.arg == "harness"]
        assert harness == ["cfg.harness"], f"{function} passes harness={harness} to {callee}"


# ───────────────────── the three real paths, one scripted conversation ─────────────────────


def tool_call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


# every attempt plays this conversation, turn by turn: a CRLF file written, edited and read, a long Bash
# output (a preview + log file) with an unknown tool (a FormatError), then submit
TURNS = [
    tool_call("Write", file_path="/app/x.txt", content="a\r\nb\r\n"),
    tool_call("Edit", file_path="/app/x.txt", old_string="b", new_string="c") + "\n" + tool_call("Read", file_path="/app/x.txt"),
    tool_call("Bash", command="cat /app/x.txt; head -c 3000 /dev/zero | tr '\\0' y") + "\n" + tool_call("Nope"),
    tool_call("Bash", command="submit"),
]

# configs/local.toml as the CLI loads it. Harness: only the context window grows (the tiny tokenizer spends ~1
# token per character, SmolLM2 ~4: this conversation's ~5,400 tokens would not fit 4,096), and the trainer's
# micro-batch with it. The rest only makes the run small: one step of one 2-attempt group, one probe attempt,
# one eval trial, and the sandbox backend the other sandbox tests use.
HARNESS_BUDGETS = ["harness.context_window_tokens=16384", "training.micro_batch_tokens=16384"]
SMALL_RUN = ["runtime.steps=1", "runtime.group_size=2", "runtime.max_inflight_attempts=2",
             "runtime.discard_zero_signal_groups=false",  # every attempt plays the same conversation: equal rewards
             "tasks.probe.attempts_per_task=1", "evaluation.trials_per_task=1", "evaluation.pass_at_k=[1]",
             f"sandbox.backend={os.environ.get('FIREFLASH_TEST_SANDBOX', 'bwrap')}"]


def scripted_engine(tok, assistant_prefix: str) -> ScriptedEngine:
    """Turn n of any attempt plays ``TURNS[n]``; the harness has already put the assistant prefix in the prompt."""

    def turn(request):
        text = TURNS[int(request.request_id.rsplit("-turn", 1)[1])]
        assert text.startswith(assistant_prefix)
        return text.removeprefix(assistant_prefix)

    return ScriptedEngine(tok, turn)


def graders():
    made = {}
    return lambda task: made.setdefault(task.id, make_grader(task.grader))


async def train(cfg, engine, tok, run_dir: Path) -> dict:
    """``fireflash train`` (cli/train.py ``_train``) with the tiny random model; returns the harness config
    its first attempt recorded."""
    from fireflash.models import build_tiny_model
    from fireflash.runtime.local import LocalRuntime
    from fireflash.curation.pool import load_pool
    from fireflash.training.trainer import Trainer

    trainer = Trainer(build_tiny_model(len(tok), seed=0), tok, cfg.training, cfg.rl,
                      temperature=cfg.harness.sampling.temperature)
    backend, rt = make_backend(cfg.sandbox), cfg.runtime
    runtime = LocalRuntime(
        tasks=load_pool([str(TASK_DIR)], cfg.tasks.pool_manifest), backend=backend, engine=engine, tokenizer=tok,
        trainer=trainer, grader_for=graders(), harness=cfg.harness, objective=cfg.rl, run_dir=run_dir, steps=rt.steps,
        group_size=rt.group_size, groups_per_step=rt.groups_per_step, max_inflight_attempts=rt.max_inflight_attempts,
        max_attempt_retries=rt.max_attempt_retries, discard_zero_signal_groups=rt.discard_zero_signal_groups,
        seed=rt.seed, mode=rt.mode, hang_margin_sec=rt.hang_margin_sec, max_wall_sec=rt.max_wall_sec,
        checkpoint_every_steps=cfg.training.checkpoint_every_steps, cursor=None, writer=None,
        save_trajectories=cfg.tracking.save_trajectories, max_queued_groups=rt.max_queued_groups,
    )
    try:
        await runtime.run()
    finally:
        await backend.close()
    assert runtime.trainer.step == 1
    return json.loads((run_dir / "trajectories" / "g00000" / "a00.json").read_text())["metadata"]["harness"]


async def probe(cfg, engine, tok, out: Path) -> dict:
    """``fireflash tasks probe`` (cli/evaluation.py ``probe_command``); returns the harness config its
    manifest recorded (probing saves no trajectories)."""
    from fireflash.tasks.loader import load_tasks
    from fireflash.curation.probe import probe_tasks

    p, backend = cfg.tasks.probe, make_backend(cfg.sandbox)
    try:
        manifest, unprobed = await probe_tasks(
            load_tasks([str(TASK_DIR)])[0], backend=backend, engine=engine, tokenizer=tok, harness=cfg.harness,
            grader_for=graders(), attempts_per_task=p.attempts_per_task, keep_min_pass_rate=p.keep_min_pass_rate,
            keep_max_pass_rate=p.keep_max_pass_rate, group_size=cfg.runtime.group_size,
            max_concurrent=cfg.runtime.max_inflight_attempts, max_retries=cfg.runtime.max_attempt_retries,
            manifest_path=out / "pool_manifest.json", model="scripted", show_progress=False,
        )
    finally:
        await backend.close()
    assert unprobed == [] and len(manifest.tasks) == 1
    return manifest.harness


async def evaluate(cfg, engine, tok, out: Path) -> dict:
    """``fireflash eval`` (cli/evaluation.py ``eval_command``); returns the harness config its first
    trial recorded."""
    from fireflash.evaluation.runner import evaluate
    from fireflash.tasks.loader import load_tasks

    ev, backend = cfg.evaluation, make_backend(cfg.sandbox)
    try:
        results = await evaluate(
            load_tasks([str(TASK_DIR)])[0], backend=backend, engine=engine, tokenizer=tok, harness=cfg.harness,
            grader_for=graders(), trials_per_task=ev.trials_per_task, ks=ev.pass_at_k, prices=None,
            max_concurrent=cfg.runtime.max_inflight_attempts, max_retries=cfg.runtime.max_attempt_retries,
            out_dir=out, model="scripted", setting=ev.setting, engine_settings=cfg.engine.model_dump(mode="json"),
        )
    finally:
        await backend.close()
    [trial] = results.trials
    assert not trial.lost and trial.finish_reason == "submit"
    return json.loads((out / trial.trajectory_path).read_text())["metadata"]["harness"]


# each path's first attempt: the ids its entry point gives it (first try)
USES = {"training": (train, "text-count-lines/g0/a0#1"), "probing": (probe, "probe/text-count-lines/t0#1"),
        "evaluation": (evaluate, "eval/text-count-lines/t0#1")}


def first_difference(a: list[int], b: list[int], renderer: ChatRenderer) -> str:
    """Where two prompts part, decoded around the first differing token."""
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    at = slice(max(0, i - 40), i + 40)
    return f"token {i} of {len(a)} vs {len(b)}: {renderer.decode(a[at])!r} vs {renderer.decode(b[at])!r}"


@pytest.mark.sandbox
@pytest.mark.integration
def test_prompts_tool_specs_and_results_are_byte_identical_across_uses(tiny_tok, tmp_path):
    cfg = load_config(CONFIG, HARNESS_BUDGETS + SMALL_RUN)
    requests, recorded = {}, {}
    for use, (run, attempt_id) in USES.items():
        engine = scripted_engine(tiny_tok, cfg.harness.assistant_prefix)
        recorded[use] = asyncio.run(run(cfg, engine, tiny_tok, tmp_path / use))
        requests[use] = [r for r in engine.requests if r.request_id.rsplit("-turn", 1)[0] == attempt_id]

    renderer = ChatRenderer(tiny_tok)
    reference = requests["training"]
    assert len(reference) == len(TURNS), f"training played {len(reference)} of the {len(TURNS)} scripted turns"
    for use, reqs in requests.items():
        assert len(reqs) == len(reference), f"{use}: {len(reqs)} turns, training {len(reference)}"
        for n, (r, ref) in enumerate(zip(reqs, reference)):
            assert r.prompt_ids == ref.prompt_ids, f"{use} turn {n}: " + first_difference(r.prompt_ids, ref.prompt_ids, renderer)
            assert r.params.model_dump() == ref.params.model_dump(), f"{use} turn {n}: sampling params differ"
    # settings this conversation never reaches (max_turns, timeouts) show only in the config each path ran with
    for use, harness in recorded.items():
        assert harness == cfg.harness.model_dump(mode="json"), f"{use} ran with another harness config"

    # what was compared is the real thing: the system prompt, the four tool specs, the task, the tool results
    first, last = renderer.decode(reference[0].prompt_ids), renderer.decode(reference[-1].prompt_ids)
    assert system_prompt("/app", cfg.harness.system_prompt_path) in first  # the task's workdir
    tools = first.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in tools.splitlines()] == TOOL_SPECS == json.loads(renderer.tool_specs_json())
    assert "Count the lines of `/app/notes.txt`" in first and first.endswith(cfg.harness.assistant_prefix)
    for result in ("Created /app/x.txt (6 bytes", "Edited /app/x.txt: replaced 1", "     1\ta\n     2\tc", "exit code 0 ·",
                   "output cut: 3,006 bytes", "FormatError: unknown tool 'Nope'"):
        assert result in last, result
    s = cfg.harness.sampling
    assert reference[0].params.model_dump() == {
        "temperature": s.temperature, "top_p": s.top_p, "max_new_tokens": s.max_new_tokens_per_turn,
        "stop_token_ids": [tiny_tok.eos_token_id], "n_top_logprobs": s.n_top_logprobs, "seed": None,
    }
