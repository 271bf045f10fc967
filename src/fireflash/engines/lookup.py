"""Prompt-lookup drafts: guess the next tokens by copying what followed the last n-gram earlier in context.

Agent turns copy a lot (file contents, paths, command output echoed into edits), so the tokens after an
earlier occurrence of the current suffix are a free draft for speculative decoding (Saxena 2023,
"prompt lookup decoding"; transformers' ``prompt_lookup_num_tokens``). The engine verifies drafts
exactly (``sampling.accept_draft``), so a bad draft costs compute, never correctness.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def propose_draft(
    history: np.ndarray, max_draft_tokens: int, ngram_max: int = 3, ngram_min: int = 1
) -> list[int]:
    """Draft up to ``max_draft_tokens`` ids continuing ``history`` from its most recent earlier n-gram match.

    Tries the longest n-gram first (``ngram_max`` down to ``ngram_min``); among matches of one length the
    most recent wins (agents re-read what they just wrote).

    Args:
        history: [L] int64 token ids seen so far (prompt + sampled), the last one not yet decoded.
        max_draft_tokens: draft length cap (>= 0).
        ngram_max / ngram_min: suffix lengths to match, tokens.

    Returns:
        The draft ids (possibly empty).
    """
    n_total = history.shape[0]
    if max_draft_tokens <= 0 or n_total < 2:
        return []
    for n in range(min(ngram_max, n_total - 1), ngram_min - 1, -1):
        suffix = history[n_total - n :]
        # windows starting at 0 .. L-n-1: every earlier occurrence, excluding the suffix itself
        windows = sliding_window_view(history[: n_total - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size == 0:
            continue
        start = int(hits[-1]) + n
        draft = history[start : start + max_draft_tokens]
        if draft.size:
            return [int(t) for t in draft]
    return []
