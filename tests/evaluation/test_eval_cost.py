"""Cost arithmetic with cached tokens, price resolution (config, LiteLLM rows, reference model)."""

import pytest

from fireflash.config import ConfigError, load_config
from fireflash.evaluation.config import PricesConfig
from fireflash.evaluation.cost import (
    PriceUnavailable,
    TokenPrices,
    cost_per_solve_usd,
    prices_from_litellm_entry,
    resolve_prices,
    trial_cost_usd,
)
from fireflash.protocols import TokenCounts

pytestmark = pytest.mark.unit

PRICES = TokenPrices(input_usd_per_mtok=2.0, cached_input_usd_per_mtok=0.5, output_usd_per_mtok=8.0, source="config")


def test_cached_tokens_billed_at_cached_price():
    counts = TokenCounts(n_input_tokens=10_000, n_cached_input_tokens=6_000, n_output_tokens=2_000)
    # 4,000 uncached × $2/M + 6,000 cached × $0.5/M + 2,000 output × $8/M = $0.008 + $0.003 + $0.016
    assert trial_cost_usd(counts, PRICES) == pytest.approx(0.027, abs=1e-15)
    no_cache = TokenCounts(n_input_tokens=10_000, n_cached_input_tokens=0, n_output_tokens=2_000)
    assert trial_cost_usd(no_cache, PRICES) == pytest.approx(0.036, abs=1e-15)


def test_more_cached_than_input_is_an_error():
    with pytest.raises(ValueError, match="n_cached_input_tokens"):
        trial_cost_usd(TokenCounts(n_input_tokens=5, n_cached_input_tokens=6), PRICES)


def test_cost_per_solve():
    assert cost_per_solve_usd(1.5, 3) == pytest.approx(0.5)
    assert cost_per_solve_usd(1.5, 0) is None


def test_config_prices_win_and_cached_defaults_to_input():
    p = resolve_prices(PricesConfig(input_usd_per_mtok=1.0, output_usd_per_mtok=3.0, reference_model="gpt-4o"), "x")
    assert (p.input_usd_per_mtok, p.cached_input_usd_per_mtok, p.output_usd_per_mtok) == (1.0, 1.0, 3.0)
    assert p.source == "config:gpt-4o"  # billed as the reference model, whoever supplied the numbers
    p = resolve_prices(PricesConfig(input_usd_per_mtok=1.0, cached_input_usd_per_mtok=0.1, output_usd_per_mtok=3.0), "x")
    assert (p.cached_input_usd_per_mtok, p.source) == (0.1, "config")


def test_local_config_bills_at_its_reference_models_litellm_price():
    # LiteLLM 1.110's model_cost row for gpt-4.1-nano (USD per token): the numbers configs/local.toml copies, so
    # eval costs are the same with or without LiteLLM installed
    row = {"input_cost_per_token": 1e-07, "cache_read_input_token_cost": 2.5e-08, "output_cost_per_token": 4e-07}
    prices = load_config("configs/local.toml").evaluation.prices
    assert prices.reference_model == "gpt-4.1-nano"
    from_config = resolve_prices(prices, "runs/sft/model")
    from_litellm = prices_from_litellm_entry(row, "gpt-4.1-nano")
    assert from_config.source == "config:gpt-4.1-nano"
    assert from_config.model_dump(exclude={"source"}) == pytest.approx(from_litellm.model_dump(exclude={"source"}))


def test_litellm_row_is_per_token_converted_to_per_million():
    row = {"input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05, "cache_read_input_token_cost": 1.25e-06}
    p = prices_from_litellm_entry(row, "gpt-4o")
    assert p.input_usd_per_mtok == pytest.approx(2.5)
    assert p.cached_input_usd_per_mtok == pytest.approx(1.25)
    assert p.output_usd_per_mtok == pytest.approx(10.0)
    assert p.source == "litellm:gpt-4o"
    no_cache = prices_from_litellm_entry({"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06}, "m")
    assert no_cache.cached_input_usd_per_mtok == pytest.approx(1.0)


def test_unknown_model_names_the_fix():
    with pytest.raises(PriceUnavailable, match="evaluation.prices.reference_model"):
        resolve_prices(PricesConfig(reference_model="no-such-model-fireflash"), "smollm2-135m")


def test_half_given_prices_are_a_config_error():
    with pytest.raises(ConfigError, match="input_usd_per_mtok and output_usd_per_mtok together"):
        load_config(None, ["evaluation.prices.input_usd_per_mtok=1.0"])
    with pytest.raises(ConfigError, match="pass_at_k"):
        load_config(None, ["evaluation.pass_at_k=[1, 6]"])
