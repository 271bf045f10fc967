"""A readable transcript of a ``Trajectory`` (what ``fireflash agent replay`` prints)."""

from __future__ import annotations

import json

from fireflash.protocols import Trajectory


def render_transcript(traj: Trajectory, max_chars_per_message: int | None = None) -> str:
    """The conversation as plain text: a header with outcome and token counts, then each message.

    Args:
        traj: the attempt.
        max_chars_per_message: cut longer messages to head + tail (None: show everything).
    """
    c = traj.token_counts
    lines = [
        (
            f"# {traj.task_id} · attempt {traj.attempt_id} · {traj.status.value} ({traj.finish_reason}) · "
            f"{traj.n_turns} turns · {len(traj.segments)} segment(s)"
        ),
        (
            f"# tokens: {c.n_input_tokens} input ({c.n_cached_input_tokens} cached), {c.n_output_tokens} output · "
            + " · ".join(f"{k} {v:.2f} s" for k, v in traj.timings_sec.items())
        ),
    ]
    if traj.error is not None:
        lines.append(f"# error: {traj.error.type}: {traj.error.message}")
    # the last n_turns assistant messages were sampled; earlier ones are few-shot examples
    n_assistant = sum(m.role == "assistant" for m in traj.messages)
    turn = traj.n_turns - n_assistant
    for m in traj.messages:
        if m.role == "assistant":
            turn += 1
        tag = (f"assistant · turn {turn}" if turn > 0 else "assistant · example") if m.role == "assistant" else m.role
        if m.tool_call_id:
            tag += f" · {m.tool_call_id}"
        text = m.content
        if max_chars_per_message and len(text) > max_chars_per_message:
            half = max_chars_per_message // 2
            text = f"{text[:half]}\n[... {len(text) - 2 * half} characters ...]\n{text[-half:]}"
        lines += ["", f"── {tag} " + "─" * max(0, 60 - len(tag)), text]
        if m.reasoning:
            lines.append(f"(reasoning) {m.reasoning}")
        lines += [f"  → {tc.name} {json.dumps(tc.arguments, ensure_ascii=False)}" for tc in m.tool_calls]
    return "\n".join(lines) + "\n"
