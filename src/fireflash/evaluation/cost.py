"""Cost of a trial in USD from its token counts and per-token prices (RECIPE.md §6).

    prices = resolve_prices(cfg.evaluation.prices, model_name="gpt-4o")   # config, else LiteLLM
    usd = trial_cost_usd(trajectory.token_counts, prices)

A trial's prompt tokens include those the engine served from its prefix cache
(``TokenCounts.n_cached_input_tokens`` ⊆ ``n_input_tokens``, filled from the engine's
``n_cached_prompt_tokens`` reports); those are billed at the cached-input price, the rest at the input
price, sampled tokens at the output price — the convention of public APIs and LiteLLM.

Prices come from config when given, else from LiteLLM's price table when ``litellm`` is installed
(``pip install 'fireflash[cost]'``; an optional import, read from the table LiteLLM ships so that a run is
offline and reproducible). A self-hosted model has no public price, so it is billed at a named reference
model's price (``evaluation.prices.reference_model``), as the reference report bills its model at its
base model's public price; the prices' ``source`` names that model either way.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fireflash.evaluation.config import PricesConfig
from fireflash.protocols import TokenCounts

PER_MTOK = 1_000_000


class PriceUnavailable(LookupError):
    """No price for a model: not in config and not known to LiteLLM (or LiteLLM is not installed)."""


class TokenPrices(BaseModel):
    """USD per million tokens, and where the numbers came from."""

    model_config = ConfigDict(extra="forbid")

    input_usd_per_mtok: float = Field(ge=0)
    cached_input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)
    source: str = Field(
        description="'config' or 'litellm', then ':<model>' when billed at a named model's price, e.g. "
        "'config:gpt-4.1-nano' or 'litellm:gpt-4.1-nano'."
    )


def litellm_prices(model: str) -> TokenPrices | None:
    """``model``'s prices from LiteLLM's ``model_cost`` table; None if LiteLLM is absent or lacks the model.

    LiteLLM stores USD per token: ``input_cost_per_token``, ``output_cost_per_token`` and, for models
    with prompt caching, ``cache_read_input_token_cost`` (absent: cached input costs the input price).
    The table is the one shipped inside the installed LiteLLM: by default LiteLLM fetches a newer one from
    GitHub at import, which would make costs depend on the day (and hang offline).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError:
        return None
    entry: dict[str, Any] | None = litellm.model_cost.get(model)
    if not entry or entry.get("input_cost_per_token") is None or entry.get("output_cost_per_token") is None:
        return None
    return prices_from_litellm_entry(entry, model)


def prices_from_litellm_entry(entry: dict[str, Any], model: str) -> TokenPrices:
    """One row of LiteLLM's ``model_cost`` (USD per token) → ``TokenPrices`` (USD per million tokens)."""
    input_usd = float(entry["input_cost_per_token"]) * PER_MTOK
    cached = entry.get("cache_read_input_token_cost")
    return TokenPrices(
        input_usd_per_mtok=input_usd,
        cached_input_usd_per_mtok=input_usd if cached is None else float(cached) * PER_MTOK,
        output_usd_per_mtok=float(entry["output_cost_per_token"]) * PER_MTOK,
        source=f"litellm:{model}",
    )


def resolve_prices(cfg: PricesConfig, model_name: str) -> TokenPrices:
    """The prices to bill ``model_name`` at.

    Order: prices set in ``cfg`` (cached input defaults to the input price); else LiteLLM's price of
    ``cfg.reference_model`` when set, otherwise of ``model_name``. Config prices with a
    ``reference_model`` are recorded as that model's (source ``config:<reference_model>``).

    Raises:
        PriceUnavailable: no config prices and LiteLLM cannot price the model; the message names the fix.
    """
    if cfg.input_usd_per_mtok is not None and cfg.output_usd_per_mtok is not None:
        cached = cfg.cached_input_usd_per_mtok
        return TokenPrices(
            input_usd_per_mtok=cfg.input_usd_per_mtok,
            cached_input_usd_per_mtok=cfg.input_usd_per_mtok if cached is None else cached,
            output_usd_per_mtok=cfg.output_usd_per_mtok,
            source=f"config:{cfg.reference_model}" if cfg.reference_model else "config",
        )
    name = cfg.reference_model or model_name
    prices = litellm_prices(name)
    if prices is None:
        raise PriceUnavailable(
            f"no price for model {name!r}: set evaluation.prices.input_usd_per_mtok and output_usd_per_mtok "
            f"(and cached_input_usd_per_mtok), or evaluation.prices.reference_model to a model LiteLLM knows "
            f"(pip install litellm); a self-hosted model is billed at its reference model's public price"
        )
    return prices


def trial_cost_usd(counts: TokenCounts, prices: TokenPrices) -> float:
    """USD of one trial: uncached input + cached input + output tokens at their prices (RECIPE.md §6).

    Raises:
        ValueError: more cached than input tokens (the counts are inconsistent).
    """
    if counts.n_cached_input_tokens > counts.n_input_tokens:
        raise ValueError(
            f"n_cached_input_tokens ({counts.n_cached_input_tokens}) > n_input_tokens ({counts.n_input_tokens}): "
            "cached tokens are a part of the input tokens"
        )
    uncached = counts.n_input_tokens - counts.n_cached_input_tokens
    return (
        uncached * prices.input_usd_per_mtok
        + counts.n_cached_input_tokens * prices.cached_input_usd_per_mtok
        + counts.n_output_tokens * prices.output_usd_per_mtok
    ) / PER_MTOK


def cost_per_solve_usd(total_cost_usd: float, n_solved: int) -> float | None:
    """Total spend divided by solves; None when nothing was solved (the cost of a solve is unbounded)."""
    return total_cost_usd / n_solved if n_solved else None
