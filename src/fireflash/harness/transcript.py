"""A readable transcript of a ``Trajectory`` (what ``fireflash agent replay`` prints).

Command output is the agent's: it may hold ESC sequences, carriage returns or bidi overrides that would
drive the reader's terminal. The transcript shows them escaped (``\x1b``, ``\r``, ``\u202e``); only newline
and tab pass through. The trajectory JSON keeps the exact text.
"""

from __future__ import annotations

import json
import re

from fireflash.protocols import Trajectory

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), bidi embeddings/overrides/isolates
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": r"\r", "\b": r"\b", "\v": r"\v", "\f": r"\f"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escape_controls(text: str) -> str:
    """``text`` safe to print on a terminal: control characters other than newline and tab written as escapes."""
    return _CONTROL.sub(_escape, text)


def render_transcript(traj: Trajectory, max_chars_per_message: int | None = None) -> str:
    """The conversation as plain text: a header with outcome and token counts, then each message.

    Control characters are escaped (see the module docstring), so the text is safe to print.

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
    return escape_controls("\n".join(lines)) + "\n"
