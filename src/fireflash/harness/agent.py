"""The agent loop: one attempt at one task, recorded token-exactly (RECIPE.md §4, STYLE.md 4).

``run_attempt`` is the one entry point that training rollouts, difficulty probing and evaluation all
call. ``Agent.run()`` repeats ``step()``: sample a turn on the running token sequence, parse tool calls,
run them in the sandbox, append the rendered results. Limits end the loop as ``AttemptEnd`` exceptions;
the ``Trajectory`` is assembled in a ``finally`` block, so it exists even when the attempt fails.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from typing import Any

from fireflash.harness.compaction import SUMMARY_REQUEST, should_compact, shrink, summary_reserve_tokens
from fireflash.harness.config import HarnessConfig
from fireflash.harness.parsing import ParsedCall, parse_tool_calls
from fireflash.harness.prompt import opening_messages
from fireflash.harness.rendering import ChatRenderer
from fireflash.harness.specs import SUBMIT_COMMAND, FormatError
from fireflash.harness.tokens import PrefixGuard, SegmentBuilder
from fireflash.harness.tools import ToolBox
from fireflash.protocols import (
    Engine,
    ErrorInfo,
    GenerateRequest,
    Message,
    SamplingParams,
    Sandbox,
    Status,
    Task,
    TokenCounts,
    ToolCall,
    Trajectory,
)

FORMAT_HINT = 'Call a tool like this:\n<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>'


class AttemptEnd(Exception):
    """The attempt is over: carries the final status and finish reason."""

    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(f"{status.value}: {reason}")
        self.status, self.reason = status, reason


class Agent:
    """Drives one attempt. Use ``run_attempt``; the class exists so each step reads on its own."""

    def __init__(self, task: Task, sandbox: Sandbox, engine: Engine, tokenizer: Any, cfg: HarnessConfig,
                 attempt_id: str) -> None:
        self.task, self.engine, self.tokenizer, self.cfg, self.attempt_id = task, engine, tokenizer, cfg, attempt_id
        self.renderer = ChatRenderer(tokenizer)
        self.tools = ToolBox(sandbox, task.environment.workdir, cfg)
        self.guard = PrefixGuard()
        self.prefix_ids = self.renderer.encode(cfg.assistant_prefix) if cfg.assistant_prefix else []
        self.max_turns = task.limits.max_turns or cfg.max_turns
        self.done: list[SegmentBuilder] = []
        self.builder = SegmentBuilder()
        self.messages: list[Message] = []
        self.counts = TokenCounts()
        self.timings = {"engine": 0.0, "tools": 0.0, "render": 0.0}
        self.turns: list[dict[str, Any]] = []
        self.compactions: list[dict[str, int]] = []
        self.turn = 0
        self.summarizing = False

    # ─────────────────────────────── the loop ───────────────────────────────

    async def run(self) -> Trajectory:
        """Run until the model answers without a tool call or a limit is hit; never raises for model errors."""
        status, reason, error = Status.FAILED, "error", None
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.task.limits.agent_timeout_sec) as deadline:
                try:
                    self.open_segment(summary=None, running_jobs=None)
                    while True:
                        await self.step()
                except AttemptEnd as end:
                    status, reason = end.status, end.reason
        except TimeoutError as e:
            if not deadline.expired():
                status, reason, error = Status.FAILED, "error", self.error_info(e)
            else:
                status, reason = Status.TRUNCATED, "timeout"
        except asyncio.CancelledError:
            status, reason = Status.ABORTED, "cancelled"
            raise
        except Exception as e:  # noqa: BLE001 — any infrastructure failure is recorded in the trajectory
            status, reason, error = Status.FAILED, "error", self.error_info(e)
        finally:
            trajectory = self.trajectory(status, reason, error, time.perf_counter() - start)
        return trajectory

    async def step(self) -> None:
        """One turn: sample on the running tokens, then act on what was sampled."""
        total = sum(len(s) for s in self.done) + len(self.builder)
        room = self.cfg.context_window_tokens - len(self.builder)
        if self.turn >= self.max_turns:
            raise AttemptEnd(Status.TRUNCATED, "max_turns")
        if total >= self.cfg.max_total_tokens:
            raise AttemptEnd(Status.TRUNCATED, "max_total_tokens")
        if room < self.cfg.min_turn_room_tokens:
            raise AttemptEnd(Status.TRUNCATED, "context")
        cap = self.cfg.summary_max_new_tokens if self.summarizing else self.cfg.sampling.max_new_tokens_per_turn
        s = self.cfg.sampling
        params = SamplingParams(
            temperature=s.temperature, top_p=s.top_p, n_top_logprobs=s.n_top_logprobs,
            max_new_tokens=max(1, min(cap, room, self.cfg.max_total_tokens - total)),
            stop_token_ids=[self.renderer.eos_id],
        )
        prompt = list(self.builder.token_ids)
        self.guard.check(prompt, self.turn)
        # model_construct: the ids come from our own builder; validating 10^5 ints per turn costs milliseconds
        request = GenerateRequest.model_construct(request_id=f"{self.attempt_id}-turn{self.turn}", prompt_ids=prompt,
                                                  params=params)
        t0 = time.perf_counter()
        [result] = await self.engine.generate([request])
        self.timings["engine"] += time.perf_counter() - t0
        if result.finish_reason == "abort":  # nothing usable was sampled: not a turn
            raise AttemptEnd(Status.ABORTED, "abort")
        self.turn += 1
        self.builder.add_sampled(result)
        self.guard.extend_last(result.token_ids)
        self.counts.n_input_tokens += len(prompt)
        self.counts.n_cached_input_tokens += result.n_cached_prompt_tokens
        self.counts.n_output_tokens += len(result.token_ids)
        if self.cfg.check_retokenization:
            self.guard.check_retokenization(result.token_ids, self.renderer, self.turn)
        ended = bool(result.token_ids) and result.token_ids[-1] == self.renderer.eos_id
        body = result.token_ids[:-1] if ended else result.token_ids
        text = self.cfg.assistant_prefix + self.renderer.decode(body)
        self.turns.append({"turn": self.turn, "segment": len(self.done), "n_prompt_tokens": len(prompt),
                           "n_sampled_tokens": len(result.token_ids), "finish_reason": result.finish_reason,
                           "weight_version": result.weight_version, "summary": self.summarizing})
        if self.summarizing:
            self.messages.append(Message(role="assistant", content=text))
            await self.compact(text)
        elif not ended:
            await self.cut_turn(text, len(result.token_ids))
        else:
            await self.act(text)

    async def act(self, text: str) -> None:
        """Parse the turn's tool calls, run them in order, append their results."""
        items = parse_tool_calls(text)
        ids = [f"call_{self.turn}_{i}" for i in range(len(items))]
        calls = [ToolCall(id=i, name=c.name, arguments=c.arguments) for i, c in zip(ids, items) if isinstance(c, ParsedCall)]
        self.messages.append(Message(role="assistant", content=text, tool_calls=calls))
        if not items:
            raise AttemptEnd(Status.COMPLETED, "stop")
        t0 = time.perf_counter()
        results: list[dict[str, Any]] = []
        for call_id, item in zip(ids, items):
            if isinstance(item, ParsedCall) and item.name == "Bash" and item.arguments["command"].strip() == SUBMIT_COMMAND:
                self.timings["tools"] += time.perf_counter() - t0
                raise AttemptEnd(Status.COMPLETED, "submit")  # the calls before it in the message have run
            if isinstance(item, FormatError):
                content = f"FormatError: {item}\n{FORMAT_HINT}"
            else:
                content = await self.tools.call(item)
            results.append({"role": "tool", "content": content, "tool_call_id": call_id})
        notices = await self.tools.bash.finished_notices()
        if notices:
            results[-1]["content"] += "\n" + "\n".join(notices)
        self.timings["tools"] += time.perf_counter() - t0
        await self.append(results, closed=True)

    async def cut_turn(self, text: str, n_tokens: int) -> None:
        """The turn hit its token cap: truncated, not a format error; nothing in it runs."""
        self.messages.append(Message(role="assistant", content=text))
        self.turns[-1]["truncated"] = True
        if len(self.builder) >= self.cfg.context_window_tokens:
            raise AttemptEnd(Status.TRUNCATED, "context")
        notice = (f"[Your message was cut off at {n_tokens} tokens and nothing in it was run. "
                  "Write shorter messages: one tool call at a time, files in one Write.]")
        await self.append([{"role": "user", "content": notice}], closed=False)

    # ─────────────────────────────── tokens ───────────────────────────────

    async def append(self, messages: list[dict[str, Any]], closed: bool) -> None:
        """Append rendered messages + the next generation prompt (+ assistant prefix); compact if due."""
        t0 = time.perf_counter()
        head = [] if closed else [self.renderer.eos_id]
        frag = self.renderer.fragment_ids(messages)
        window = self.cfg.context_window_tokens
        if should_compact(len(self.builder) + len(head) + len(frag), window, self.cfg.compact_at):
            self.summarizing = True
            self.compactions.append({"turn": self.turn, "n_context_tokens": len(self.builder)})
            reserve = summary_reserve_tokens(self.cfg.summary_max_new_tokens, window)
            messages = messages + [{"role": "user", "content": SUMMARY_REQUEST}]
            frag = self.renderer.fragment_ids(messages)
            budget = max((len(m["content"]) for m in messages), default=0)
            while len(self.builder) + len(head) + len(frag) + reserve > window and budget > 200:
                budget //= 2
                messages = [{**m, "content": shrink(m["content"], budget)} if m["role"] == "tool" else m for m in messages]
                frag = self.renderer.fragment_ids(messages)
        self.builder.add_prompt(head + frag + self.prefix_ids)
        self.messages.extend(Message(role=m["role"], content=m["content"], tool_call_id=m.get("tool_call_id"))
                             for m in messages)
        self.timings["render"] += time.perf_counter() - t0

    def open_segment(self, summary: str | None, running_jobs: list[str] | None) -> None:
        """Start a segment from system prompt + (few-shot) + task (+ summary and running jobs)."""
        opening = opening_messages(self.task.instruction, self.task.environment.workdir, self.cfg.few_shot,
                                   self.cfg.system_prompt_path, summary, running_jobs)
        if self.builder.token_ids:  # compaction: the old segment is finished
            self.done.append(self.builder)
            self.builder = SegmentBuilder()
            self.guard.reset()
        self.builder.add_prompt(self.renderer.prompt_ids(opening) + self.prefix_ids)
        # after a compaction the system prompt and few-shot turns are already in the readable history
        for m in opening[-1:] if self.done else opening:
            calls = [ToolCall(id=f"example_{i}", **c) for i, c in enumerate(m.get("tool_calls", []))]
            self.messages.append(Message(role=m["role"], content=m["content"], tool_calls=calls))

    async def compact(self, summary: str) -> None:
        """The summary turn is done: continue in a new segment from it (RECIPE.md §4)."""
        self.summarizing = False
        self.open_segment(summary=summary, running_jobs=await self.tools.bash.running_jobs())

    # ─────────────────────────────── the record ───────────────────────────────

    @staticmethod
    def error_info(e: BaseException) -> ErrorInfo:
        return ErrorInfo(type=type(e).__name__, message=str(e), traceback=traceback.format_exc())

    def trajectory(self, status: Status, reason: str, error: ErrorInfo | None, total_sec: float) -> Trajectory:
        """The attempt as recorded so far (called in ``finally``: always succeeds)."""
        builders = self.done + ([self.builder] if self.builder.token_ids else [])
        timings = dict(self.timings, total=total_sec)
        timings["harness"] = max(0.0, total_sec - timings["engine"] - timings["tools"])
        return Trajectory(
            task_id=self.task.id, attempt_id=self.attempt_id, segments=[b.to_segment() for b in builders],
            messages=self.messages, status=status, finish_reason=reason, n_turns=self.turn,
            token_counts=self.counts, timings_sec=timings, error=error,
            metadata={
                "harness": self.cfg.model_dump(mode="json"),
                "template": "native" if self.renderer.native_tools else "fireflash-tool-chatml",
                "few_shot": self.cfg.few_shot, "assistant_prefix": self.cfg.assistant_prefix,
                "turns": self.turns, "compactions": self.compactions, "drift": self.guard.drift,
            },
        )


async def run_attempt(task: Task, sandbox: Sandbox, engine: Engine, tokenizer: Any, cfg: HarnessConfig,
                      attempt_id: str) -> Trajectory:
    """Run one attempt of ``task`` in ``sandbox`` with ``engine``; the same call for training, probing, eval.

    Args:
        task: the task (instruction, workdir, limits: ``agent_timeout_sec`` is the wall-clock limit, seconds).
        sandbox: a fresh fork for this attempt; the caller closes it (and grades a fork of it).
        engine: samples turns; every sampled token records its weight version.
        tokenizer: the policy's Hugging Face tokenizer (its eos token ends assistant turns).
        cfg: harness settings.
        attempt_id: unique id, used in request ids and the trajectory.

    Returns:
        The ``Trajectory``; status FAILED with ``error`` set if the sandbox or engine broke.

    Raises:
        asyncio.CancelledError: the caller cancelled the attempt (after the trajectory was assembled).
    """
    return await Agent(task, sandbox, engine, tokenizer, cfg, attempt_id).run()
