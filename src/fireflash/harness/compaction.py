"""Context compaction (RECIPE.md §4: at ``compact_at`` of the window, keep state and the prefix cache).

The summary request is *appended* to the live history as a user turn, so the engine reuses the cached
prefix; the model writes a sectional summary on that prefix; a new segment then starts from the system
prompt + task + summary + the background jobs still running (a job id is never lost).
"""

from __future__ import annotations

SUMMARY_REQUEST = (
    "The context window is almost full. Do not call any tool now. Write a summary of your work so far that "
    "lets you continue without the earlier conversation, with exactly these sections:\n"
    "## Task\nWhat is asked, with every requirement.\n"
    "## Progress\nWhat is done and verified, and what failed.\n"
    "## Files\nFiles created or changed, and what each now contains.\n"
    "## Commands\nImportant commands and their results (log files for long output).\n"
    "## Background jobs\nJobs still running, by job id.\n"
    "## Next steps\nWhat remains, in order."
)


def should_compact(n_context_tokens: int, window_tokens: int, compact_at: float) -> bool:
    """True when the context reaches ``compact_at`` of the window (RECIPE.md §4, reference 0.85)."""
    return n_context_tokens >= compact_at * window_tokens


def summary_reserve_tokens(summary_max_new_tokens: int, window_tokens: int) -> int:
    """Room kept free for the summary turn when tool results are squeezed in before a compaction."""
    return min(summary_max_new_tokens, window_tokens // 8)


def shrink(content: str, max_chars: int) -> str:
    """Head + tail of a tool result cut to ``max_chars`` so the results fit before the summary turn."""
    if len(content) <= max_chars:
        return content
    half = max(1, max_chars // 2)
    return (
        f"{content[:half]}\n[... {len(content) - 2 * half:,} characters cut: the context is nearly full; Bash "
        f"output stays in its log file ...]\n{content[-half:]}"
    )
