"""The agent loop near the end of its context window, and background-job notices in the recorded history.

Scripted engine + tiny tokenizer (about one token per character) through a real sandbox, as in
test_harness_agent.py. The windows are sized from the opening prompt so each scenario is exact.
"""

import json
import re

import pytest

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.agent import run_attempt
from fireflash.harness.config import HarnessConfig, SamplingConfig
from fireflash.harness.prompt import opening_messages
from fireflash.harness.rendering import ChatRenderer
from fireflash.protocols import Status

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]

ROOM_TOKENS = 300  # room left after the opening prompt
CAP_TOKENS = 512  # per-turn cap, more than the room: the clamp must apply


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def near_full(tok, make_task, **cfg):
    """A task and a harness config whose window leaves ``ROOM_TOKENS`` after the opening prompt; no compaction."""
    task = make_task()
    opening = ChatRenderer(tok).prompt_ids(opening_messages(task.instruction, task.environment.workdir, False, None,
                                                            None, None))
    window = len(opening) + ROOM_TOKENS
    cfg = HarnessConfig(context_window_tokens=window, compact_at=1.0,
                        sampling=SamplingConfig(max_new_tokens_per_turn=CAP_TOKENS), **cfg)
    return task, cfg


def run(in_sandbox, tok, task, cfg, script):
    engine = ScriptedEngine(tok, script)
    traj = in_sandbox(lambda sb: run_attempt(task, sb, engine, tok, cfg, "a-0"))
    return traj, engine


def test_max_new_tokens_is_clamped_to_the_room_left_and_running_out_ends_truncated(in_sandbox, tiny_tok, make_task):
    task, cfg = near_full(tiny_tok, make_task)
    script = [call("Bash", command="echo hi"), "word " * 400]  # the second turn is longer than the room left
    traj, engine = run(in_sandbox, tiny_tok, task, cfg, script)
    window = cfg.context_window_tokens
    assert len(engine.requests) == 2
    for request in engine.requests:
        room = window - len(request.prompt_ids)
        assert len(request.prompt_ids) + request.params.max_new_tokens <= window
        assert request.params.max_new_tokens == min(CAP_TOKENS, room) == room
    assert (traj.status, traj.finish_reason, traj.n_turns) == (Status.TRUNCATED, "context", 2)
    assert traj.error is None and traj.metadata["turns"][-1]["truncated"] is True
    assert len(traj.segments[0].token_ids) == window
    assert traj.messages[-1].role == "assistant" and traj.messages[-1].content.startswith("word word")
    assert not any(m.content.startswith("FormatError") for m in traj.messages if m.role == "tool")


def test_too_little_room_for_a_turn_ends_truncated_before_sampling(in_sandbox, tiny_tok, make_task):
    task, cfg = near_full(tiny_tok, make_task, min_turn_room_tokens=ROOM_TOKENS - 50)
    traj, engine = run(in_sandbox, tiny_tok, task, cfg, [call("Bash", command="echo hi"), "never sampled"])
    assert (traj.status, traj.finish_reason, traj.n_turns) == (Status.TRUNCATED, "context", 1)
    assert len(engine.requests) == 1 and traj.messages[-1].role == "tool"


def test_background_job_finish_notice_is_appended_to_a_later_tool_result(in_sandbox, tiny_tok, make_task):
    def script(request):
        history = tiny_tok.decode(request.prompt_ids)
        if "Started background job" not in history:
            return call("Bash", command="sleep 1; echo hi", run_in_background=True)
        if "[background job" in history:
            return "Done."
        return call("Bash", command="sleep 0.5")

    traj, _ = run(in_sandbox, tiny_tok, make_task(), HarnessConfig(max_turns=12), script)
    assert (traj.status, traj.finish_reason) == (Status.COMPLETED, "stop"), traj.error
    results = [m.content for m in traj.messages if m.role == "tool"]
    job = re.search(r"Started background job (\S+?);", results[0]).group(1)
    noticed = [i for i, r in enumerate(results) if "[background job" in r]
    assert len(noticed) == 1 and noticed[0] >= 1  # once, on a later result than the start
    notice = results[noticed[0]]
    assert notice.startswith("exit code 0")  # the later command's own result comes first
    assert re.search(rf"\n\[background job {re.escape(job)} \(`sleep 1; echo hi`\) finished with exit code 0; "
                     r"3 bytes of output in \S+\]$", notice)
