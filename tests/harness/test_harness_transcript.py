"""Transcripts are safe to print: an agent's ESC sequences are shown escaped; the trajectory JSON keeps them."""

import json

from typer.testing import CliRunner

from fireflash.cli.agent import app
from fireflash.harness.transcript import escape_controls, render_transcript
from fireflash.protocols import ErrorInfo, Message, Status, ToolCall, Trajectory

NASTY = "\x1b[31mred\x1b[0m\x1b]0;pwned\x07 \x9b2J over\rwrite\x00\x7f \u202eevil\nline 2\tcol"


def _trajectory() -> Trajectory:
    return Trajectory(
        task_id="t", attempt_id="a", status=Status.FAILED, finish_reason="error", n_turns=1,
        messages=[
            Message(role="user", content="Do it."),
            Message(role="assistant", content="<tool_call>…</tool_call>", reasoning="think \x1b[2J",
                    tool_calls=[ToolCall(id="call_1_0", name="Bash", arguments={"command": "printf '\x1b[2J\x9b'"})]),
            Message(role="tool", content=NASTY, tool_call_id="call_1_0"),
        ],
        error=ErrorInfo(type="SandboxError", message="died \x1b[5m", traceback=""),
    )


def test_control_characters_are_escaped_except_newline_and_tab():
    assert escape_controls(NASTY) == (
        "\\x1b[31mred\\x1b[0m\\x1b]0;pwned\\x07 \\x9b2J over\\rwrite\\x00\\x7f \\u202eevil\nline 2\tcol"
    )
    assert escape_controls("plain é ✓ — 日本") == "plain é ✓ — 日本"


def test_transcript_and_replay_never_emit_control_characters(tmp_path):
    traj = _trajectory()
    text = render_transcript(traj)
    controls = {c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f or c == "\u202e"}
    assert not controls, controls
    assert "\\x1b[31mred" in text and "\\x1b[5m" in text and "think \\x1b[2J" in text
    path = tmp_path / "t-a.json"
    traj.save(path)
    assert Trajectory.load(path).messages[2].content == NASTY  # the record keeps the exact text
    assert json.loads(path.read_text())["messages"][2]["content"] == NASTY
    replay = CliRunner().invoke(app, ["replay", str(path)])
    assert replay.exit_code == 0 and replay.output == text
