"""The agent loop end to end with the scripted engine through a real sandbox."""

import json

import pytest

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.agent import run_attempt
from fireflash.harness.compaction import SUMMARY_REQUEST
from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.harness.rendering import ChatRenderer
from fireflash.harness.tokens import PrefixDrift, PrefixGuard
from fireflash.protocols import Status, Task, TaskEnvironment, Trajectory

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


FIVE_TURNS = [
    "I will check the directory first.\n" + call("Bash", command="ls -la /app && echo ok"),
    call("Write", file_path="/app/hello.py", content="def greet():\n    return 'hi'\n"),
    call("Edit", file_path="/app/hello.py", old_string="'hi'", new_string="'hello'"),
    call("Read", file_path="/app/hello.py") + "\n" + call("Bash", command="python3 -c 'import sys; sys.path.insert(0, \"/app\"); import hello; print(hello.greet())'"),
    "Done: /app/hello.py returns 'hello'.",
]


def attempt(in_sandbox, tok, script, cfg=None, task=None, engine=None):
    engine = engine or ScriptedEngine(tok, script)
    task = task or Task(id="t-harness", instruction="Create /app/out.txt.", environment=TaskEnvironment(workdir="/app"))
    traj = in_sandbox(lambda sb: run_attempt(task, sb, engine, tok, cfg or HarnessConfig(), "a-0"))
    return traj, engine


def sampled_spans(segment):
    spans, start = [], None
    for i, m in enumerate(segment.loss_mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_five_turns_token_exact_with_smollm2_tokenizer(in_sandbox):
    from transformers import PreTrainedTokenizerFast

    from fireflash.models import resolve_model_dir

    # the same tokenizer files load_tokenizer reads; AutoTokenizer's own start-up costs ~10 s more here
    tok = PreTrainedTokenizerFast.from_pretrained(resolve_model_dir("smollm2-135m"))
    assert tok.eos_token == "<|im_end|>" and "tools" not in tok.chat_template  # SmolLM2's plain ChatML
    traj, engine = attempt(in_sandbox, tok, FIVE_TURNS)
    assert traj.status == Status.COMPLETED and traj.finish_reason == "stop" and traj.n_turns == 5
    [seg] = traj.segments
    # every turn's prompt is exactly the previous prompt + its sampled tokens + rendered tool results
    for prev, cur in zip(engine.requests, engine.requests[1:]):
        start = len(prev.prompt_ids)
        assert cur.prompt_ids[:start] == prev.prompt_ids
    # the sampled spans are exactly the engine's ids, with their logprobs and weight versions
    spans = sampled_spans(seg)
    assert len(spans) == 5
    for (a, b), req in zip(spans, engine.requests):
        assert a == len(req.prompt_ids)
        assert seg.weight_version[a:b] == [0] * (b - a) and all(lp < 0 for lp in seg.rollout_logprobs[a:b])
        assert len(seg.topk_ids[a]) == 32
    # and a full re-render of the readable conversation reproduces the token sequence: no drift
    r = ChatRenderer(tok)
    msgs = [{"role": m.role, "content": m.content} for m in traj.messages]
    full = r.encode(r.render_text(msgs, add_generation_prompt=False).removesuffix("\n"))
    assert full == seg.token_ids
    assert traj.metadata["drift"] == []
    # the tools really ran: the Read and the Python check saw the edited file
    tool_texts = [m.content for m in traj.messages if m.role == "tool"]
    assert "     2\t    return 'hello'" in tool_texts[3] and tool_texts[4].rstrip().endswith("hello")
    assert Trajectory.model_validate_json(traj.model_dump_json()) == traj


def test_non_canonical_sampled_ids_are_recorded_as_drift(in_sandbox, tiny_tok):
    ids = [i for ch in "echo hello" for i in tiny_tok.encode(ch, add_special_tokens=False)]
    assert ids != tiny_tok.encode("echo hello", add_special_tokens=False)
    traj, _ = attempt(in_sandbox, tiny_tok, [ids])
    assert traj.status == Status.COMPLETED
    [drift] = traj.metadata["drift"]
    assert drift["kind"] == "retokenization" and drift["turn"] == 1


def test_prefix_guard_rejects_a_rewritten_history():
    guard = PrefixGuard()
    guard.check([1, 2, 3], turn=0)
    guard.extend_last([4, 5])
    guard.check([1, 2, 3, 4, 5, 6], turn=1)
    with pytest.raises(PrefixDrift, match="index 2"):
        guard.check([1, 2, 9, 4, 5, 6, 7], turn=2)
    assert guard.drift == [{"kind": "prefix", "turn": 2, "index": 2}]


def test_assistant_prefix_is_prompt_and_few_shot_is_recorded(in_sandbox, tiny_tok):
    prefix = '<tool_call>\n{"name": "'
    script = ['Bash", "arguments": {"command": "echo hi"}}\n</tool_call>', 'Bash", "arguments": {"command": "true"}}</tool_call>',
              'Bash", "arguments": {"command": "submit"}}</tool_call>']
    cfg = HarnessConfig(assistant_prefix=prefix, few_shot=True)
    traj, engine = attempt(in_sandbox, tiny_tok, script, cfg)
    assert (traj.status, traj.finish_reason, traj.n_turns) == (Status.COMPLETED, "submit", 3)
    assert traj.metadata["few_shot"] is True and traj.metadata["assistant_prefix"] == prefix
    seg = traj.segments[0]
    prefix_ids = tiny_tok.encode(prefix, add_special_tokens=False)
    for req in engine.requests:
        n = len(req.prompt_ids)
        assert req.prompt_ids[n - len(prefix_ids):] == prefix_ids
        assert seg.loss_mask[n - len(prefix_ids):n] == [0] * len(prefix_ids)
    assert [c.arguments.get("command") for m in traj.messages if m.role == "assistant" for c in m.tool_calls][-3:] == [
        "echo hi", "true", "submit"]
    examples = [c for m in traj.messages for c in m.tool_calls if c.id.startswith("example")]
    assert [c.name for c in examples] == ["Bash", "Edit"]  # the few-shot exchanges are in the record
    results = [m.content for m in traj.messages if m.role == "tool"]
    assert results[-2].startswith("exit code 0") and results[-2].endswith("\nhi\n") and results[-1].startswith("exit code 0")


def test_format_errors_become_tool_results_and_claim_no_call(in_sandbox, tiny_tok):
    script = ['<tool_call>{"name": "Bash", "arguments": {"command": ls}}</tool_call>', "<tool_call>", "fine"]
    traj, _ = attempt(in_sandbox, tiny_tok, script)
    assert traj.status == Status.COMPLETED
    results = [m.content for m in traj.messages if m.role == "tool"]
    assert len(results) == 2 and all(r.startswith("FormatError: ") for r in results)
    assert all(not m.tool_calls for m in traj.messages if m.role == "assistant")


def test_turn_over_its_cap_is_truncated_not_a_format_error(in_sandbox, tiny_tok):
    cfg = HarnessConfig(sampling=SamplingConfig(max_new_tokens_per_turn=6))
    traj, _ = attempt(in_sandbox, tiny_tok, [call("Bash", command="echo a long command line"), "ok"], cfg)
    assert traj.status == Status.COMPLETED and traj.metadata["turns"][0]["truncated"] is True
    notice = next(m for m in traj.messages if m.role == "user" and "cut off" in m.content)
    assert "nothing in it was run" in notice.content
    assert not any(m.content.startswith("FormatError") for m in traj.messages if m.role == "tool")


def test_compaction_appends_summary_request_and_carries_jobs(in_sandbox, tiny_tok):
    state = {"n": 0}

    def script(request):
        tail = tiny_tok.decode(request.prompt_ids[-200:])
        if SUMMARY_REQUEST[-40:] in tail:
            return "## Progress\nStarted the server as a background job."
        state["n"] += 1
        if state["n"] == 1:
            return call("Bash", command="sleep 30", run_in_background=True)
        if "Summary of your earlier work" in tiny_tok.decode(request.prompt_ids):
            return "All done."
        return call("Bash", command=f"seq 1 {40 * state['n']}")

    cfg = HarnessConfig(context_window_tokens=4096, preview_chars=600)
    traj, _ = attempt(in_sandbox, tiny_tok, None, cfg, engine=ScriptedEngine(tiny_tok, script))
    assert traj.status == Status.COMPLETED, traj.error
    assert len(traj.segments) == 2 and len(traj.metadata["compactions"]) == 1
    first, second = (tiny_tok.decode(s.token_ids) for s in traj.segments)
    # the request was appended to the live history and the summary sampled on that prefix
    assert SUMMARY_REQUEST in first and first.rstrip().endswith("Started the server as a background job.<|im_end|>")
    assert len(traj.segments[0].token_ids) < 4096
    # the new segment: system prompt + task + summary + the still-running job
    assert second.startswith("<|im_start|>system\nYou are an expert") and "Started the server" in second
    assert "Background jobs still running" in second and "sleep 30" in second
    assert traj.segments[1].loss_mask[-1] == 1


def test_limits_end_the_attempt_and_keep_the_trajectory(in_sandbox, tiny_tok, make_task):
    looping = [call("Bash", command="true")] * 5
    traj, _ = attempt(in_sandbox, tiny_tok, looping, HarnessConfig(max_turns=2))
    assert (traj.status, traj.finish_reason, traj.n_turns) == (Status.TRUNCATED, "max_turns", 2)
    traj, _ = attempt(in_sandbox, tiny_tok, looping, task=make_task(max_turns=1))
    assert traj.finish_reason == "max_turns" and traj.n_turns == 1
    # the tiny tokenizer's opening prompt is ~2,600 tokens; the budget leaves room for a turn or two
    traj, engine = attempt(in_sandbox, tiny_tok, looping, HarnessConfig(max_total_tokens=2900))
    assert traj.finish_reason == "max_total_tokens" and 1 <= traj.n_turns < 5
    assert all(len(r.prompt_ids) + r.params.max_new_tokens <= 2900 for r in engine.requests)


def test_wall_clock_limit(in_sandbox, tiny_tok, make_task):
    script = [call("Bash", command="sleep 20", timeout=30), "never"]
    traj, _ = attempt(in_sandbox, tiny_tok, script, task=make_task(agent_timeout_sec=1.0))
    assert (traj.status, traj.finish_reason) == (Status.TRUNCATED, "timeout")
    assert traj.segments and traj.segments[0].loss_mask.count(1) > 0


def test_engine_failure_is_failed_with_trajectory_saved(in_sandbox, tiny_tok):
    traj, _ = attempt(in_sandbox, tiny_tok, [call("Bash", command="echo 1")])
    assert traj.status == Status.FAILED and traj.error.type == "ScriptExhausted"
    assert traj.n_turns == 1 and traj.segments and traj.messages[-1].role == "tool"
