"""The system prompt, the task turn and optional few-shot exchanges (RECIPE.md §4: efficient workflow).

The system prompt lives in one template file (``system_prompt.md`` beside this module, or
``HarnessConfig.system_prompt_path``) with ``$workdir`` substituted. Few-shot exchanges are the worked
examples measured to lift SmolLM2's parsable-call rate from 0/12 to 7/12 (MEASURED.md); they are off by
default and, when on, are part of every segment's opening prompt and recorded in the trajectory.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

DEFAULT_SYSTEM_PROMPT = Path(__file__).with_name("system_prompt.md")

FEW_SHOT_EXCHANGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Create /tmp/demo/hello.txt containing the word hello, then show it."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "Bash", "arguments": {"command": "mkdir -p /tmp/demo && echo hello > /tmp/demo/hello.txt && cat /tmp/demo/hello.txt"}}],
    },
    {"role": "tool", "content": "exit code 0 · 6 bytes of output in /tmp/.fireflash/1.log\nhello"},
    {"role": "assistant", "content": "Created /tmp/demo/hello.txt with the word hello."},
    {"role": "user", "content": "In /tmp/demo/app.py, change the greeting from 'hi' to 'hello'."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "Edit", "arguments": {"file_path": "/tmp/demo/app.py", "old_string": "print('hi')", "new_string": "print('hello')"}}],
    },
    {"role": "tool", "content": "Edited /tmp/demo/app.py: replaced 1 occurrence (line 3)."},
    {"role": "assistant", "content": "The greeting in /tmp/demo/app.py now says hello."},
]


class PromptError(ValueError):
    """The system prompt template is missing or uses an unknown placeholder."""


def system_prompt(workdir: str, path: str | None = None) -> str:
    """The rendered system prompt.

    Raises:
        PromptError: ``path`` does not exist, or the template has a placeholder other than ``$workdir``.
    """
    file = Path(path) if path else DEFAULT_SYSTEM_PROMPT
    if not file.is_file():
        raise PromptError(f"harness.system_prompt_path = {path!r}: file not found (give a text file with $workdir)")
    try:
        return string.Template(file.read_text()).substitute(workdir=workdir).strip()
    except (KeyError, ValueError) as e:
        raise PromptError(f"{file}: bad placeholder {e}; only $workdir is substituted (write $$ for a dollar)") from None


def task_message(instruction: str, summary: str | None = None, running_jobs: list[str] | None = None) -> str:
    """The user turn that opens a segment: the task, plus the summary and live jobs after a compaction."""
    parts = [instruction.strip()]
    if summary is not None:
        parts.append("## Summary of your earlier work (the context was compacted)\n" + summary.strip())
    if running_jobs:
        parts.append("## Background jobs still running\n" + "\n".join(f"- {j}" for j in running_jobs))
    return "\n\n".join(parts)


def opening_messages(
    instruction: str, workdir: str, few_shot: bool, system_prompt_path: str | None = None, summary: str | None = None,
    running_jobs: list[str] | None = None,
) -> list[dict[str, Any]]:
    """System prompt, optional few-shot exchanges, then the task turn: the start of every segment."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(workdir, system_prompt_path)}]
    if few_shot:
        messages.extend(FEW_SHOT_EXCHANGES)
    messages.append({"role": "user", "content": task_message(instruction, summary, running_jobs)})
    return messages
