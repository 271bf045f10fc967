"""Config loading: defaults equal RECIPE.md, overrides apply, and every malformed input names its field."""

from pathlib import Path

import pytest

from fireflash.config import (
    ConfigError,
    FireFlashConfig,
    build_config,
    dump_config,
    load_config,
    parse_override,
)

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[1]


def test_recipe_defaults():
    cfg = FireFlashConfig()
    assert (cfg.runtime.group_size, cfg.rl.max_staleness, cfg.rl.score_centering_topk, cfg.rl.loss_floor_tokens) == (
        12, 6, 32, 2048)
    assert (cfg.rl.tis_clip_low, cfg.rl.tis_clip_high) == (0.5, 2.0)
    assert (cfg.rl.solve_reward, cfg.rl.partial_reward_scale, cfg.rl.length_bonus_max) == (1.5, 0.5, 0.2)
    assert (cfg.tasks.probe.attempts_per_task, cfg.tasks.probe.keep_min_pass_rate,
            cfg.tasks.probe.keep_max_pass_rate) == (4, 0.15, 0.85)
    assert cfg.harness.compact_at == 0.85 and cfg.evaluation.trials_per_task == 5


@pytest.mark.parametrize("name", ["local.toml", "cluster.toml"])
def test_shipped_configs_load(name):
    load_config(REPO / "configs" / name)


def test_cluster_keeps_reference_sizes():
    cfg = load_config(REPO / "configs/cluster.toml")
    assert (cfg.runtime.group_size, cfg.rl.max_staleness, cfg.rl.score_centering_topk, cfg.rl.loss_floor_tokens) == (
        12, 6, 32, 2048)
    assert cfg.runtime.backend == "ray" and cfg.engine.kind == "sglang"


def test_overrides_are_typed_and_nested():
    cfg = load_config(None, ["runtime.steps=3", "rl.tis=false", "engine.url=http://h:1", "training.betas=[0.8, 0.9]"])
    assert cfg.runtime.steps == 3 and cfg.rl.tis is False and cfg.engine.url == "http://h:1"
    assert cfg.training.betas == (0.8, 0.9)


def test_override_beats_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[runtime]\nsteps = 7\n")
    assert load_config(f, ["runtime.steps=2"]).runtime.steps == 2


def test_dump_roundtrip(tmp_path):
    cfg = load_config(REPO / "configs/local.toml")
    f = tmp_path / "resolved.toml"
    f.write_text(dump_config(cfg))
    assert load_config(f) == cfg


def _write(tmp_path, text):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    return f


# (toml text, substrings the single error message must contain: file, field path, value, what is allowed)
MALFORMED = [
    ("[runtime]\nsteps = 'many'\n", ["runtime.steps", "'many'", "integer"]),
    ("[runtime]\ngroup_size = 1\n", ["runtime.group_size", "= 1", "greater than or equal to 2"]),
    ("[rl]\nmax_staleness = -1\n", ["rl.max_staleness", "-1", "greater than or equal to 0"]),
    ("[rl]\ntis_clip_low = 3.0\n", ["rl", "tis_clip_low (3.0) must be < 1 < tis_clip_high (2.0)"]),
    ("[rl]\ntis_clip_high = 0.9\n", ["rl", "tis_clip_high (0.9)"]),
    ("[rl]\ntis_clip_lo = 0.4\n", ["rl.tis_clip_lo", "unknown key", "tis_clip_low"]),
    ("[runtme]\nsteps = 1\n", ["runtme", "unknown key", "runtime"]),
    ("[tasks.probe]\nkeep_min_pass_rate = 0.9\nkeep_max_pass_rate = 0.1\n", ["tasks.probe", "keep_min_pass_rate (0.9)"]),
    ("[tasks.probe]\nkeep_max_pass_rate = 1.5\n", ["tasks.probe.keep_max_pass_rate", "1.5", "less than or equal to 1"]),
    ("[sandbox]\nbackend = 'docker'\n", ["sandbox.backend", "'docker'", "'bwrap' or 'unsafe-local'"]),
    ("[harness]\ncompact_at = 0\n", ["harness.compact_at", "0", "greater than 0"]),
    ("[rl]\nloss_floor_tokens = 0\n", ["rl.loss_floor_tokens", "greater than or equal to 1"]),
    ("[harness.sampling]\ntemperature = -0.5\n", ["harness.sampling.temperature", "-0.5"]),
    ("runtime = 3\n", ["runtime = 3"]),
    ("[training]\nbetas = [0.9]\n", ["training.betas"]),
    ("[training]\nmicro_batch_tokens = 1024\n", ["micro_batch_tokens (1024) < harness.context_window_tokens (8192)"]),
    ("[harness.sampling]\nn_top_logprobs = 8\n", ["n_top_logprobs (8) < rl.score_centering_topk (32)"]),
    ("[runtime]\ngroups_per_step = 3\nmax_queued_groups = 2\n", ["runtime.max_queued_groups (2) < runtime.groups_per_step (3)"]),
    ("[tasks]\npaths = []\n", ["tasks.paths = []", "give at least one task directory"]),
    ("[training]\nlr = inf\n", ["training.lr = inf", "finite number"]),
    ("[harness.sampling]\ntemperature = nan\n", ["harness.sampling.temperature = nan", "finite number"]),
    ("[runtime]\nsteps = true\n", ["runtime.steps = true", "expected a number, not a boolean"]),
]


@pytest.mark.parametrize("text,needles", MALFORMED, ids=[m[0].split("\n")[1][:30] for m in MALFORMED])
def test_malformed_file_names_file_field_and_fix(tmp_path, text, needles):
    f = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    msg = str(err.value)
    assert str(f) in msg.splitlines()[0]
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_several_errors_reported_at_once(tmp_path):
    f = _write(tmp_path, "[runtime]\ngroup_size = 0\nsteps = 0\n")
    msg = str(pytest.raises(ConfigError, load_config, f).value)
    assert "runtime.group_size" in msg and "runtime.steps" in msg


def test_missing_file():
    with pytest.raises(ConfigError, match="nope.toml: config file not found"):
        load_config("nope.toml")


def test_unparsable_toml(tmp_path):
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        load_config(_write(tmp_path, "[runtime\nsteps=1"))


@pytest.mark.parametrize("text", ["runtime.steps", "=3", "runtime..steps=3"])
def test_malformed_override(text):
    with pytest.raises(ConfigError, match="KEY.PATH=VALUE"):
        parse_override(text)


def test_override_into_a_value_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="runtime.steps: Input should be a valid integer"):
        load_config(None, ["runtime.steps.x=1"])
    with pytest.raises(ConfigError, match="runtime.steps is a value, not a section"):
        load_config(_write(tmp_path, "[runtime]\nsteps = 3\n"), ["runtime.steps.x=1"])


def test_plain_string_override():
    assert parse_override("model.name_or_path=/models/x y") == (["model", "name_or_path"], "/models/x y")


@pytest.mark.parametrize("override,path", [
    ("training.lr=inf", "training.lr = inf"),
    ("training.lr=nan", "training.lr = nan"),
    ("harness.sampling.temperature=inf", "harness.sampling.temperature = inf"),
    ("harness.sampling.temperature=-inf", "harness.sampling.temperature = -inf"),
    ("training.betas=[0.9,inf]", "training.betas.1 = inf"),
    ("runtime.ray.trainer_gpu_share=nan", "runtime.ray.trainer_gpu_share = nan"),
    ("tasks.probe.keep_min_pass_rate=nan", "tasks.probe.keep_min_pass_rate = nan"),
    ("sft.lr=inf", "sft.lr = inf"),
    ("engine.retry_backoff_sec=inf", "engine.retry_backoff_sec = inf"),
    ("runtime.max_wall_sec=inf", "runtime.max_wall_sec = inf"),
    ('training.lr="inf"', "training.lr = inf"),  # a string pydantic would turn into a float
    ("engine.args.mem-fraction=nan", "engine.args.mem-fraction = nan"),
])
def test_non_finite_numbers_are_refused_with_their_path(override, path):
    msg = str(pytest.raises(ConfigError, load_config, None, [override]).value)
    assert f"  {path}: must be a finite number (inf and nan are not allowed)" in msg.splitlines(), msg


@pytest.mark.parametrize("override", ["runtime.steps=true", "training.lr=false", "runtime.max_wall_sec=true",
                                      "engine.num_threads=true"])
def test_a_boolean_is_not_a_number(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=f"{key} = (true|false): expected a number, not a boolean"):
        load_config(None, [override])
    assert load_config(None, ["rl.tis=false", "runtime.steps=1"]).rl.tis is False  # booleans stay booleans


def test_cross_section_errors_are_not_prefixed_with_root():
    msg = str(pytest.raises(ConfigError, load_config, None, ["training.micro_batch_tokens=1024"]).value)
    assert msg.splitlines()[1].startswith("  training.micro_batch_tokens (1024) < harness.context_window_tokens")


def test_not_utf8_names_the_file(tmp_path):
    f = tmp_path / "latin1.toml"
    f.write_bytes("# caf\xe9\n[runtime]\nsteps = 3\n".encode("latin-1"))
    msg = str(pytest.raises(ConfigError, load_config, f).value)
    assert msg == f"{f}: not UTF-8 (byte 5 is 0xe9); save the file as UTF-8, as TOML requires"


def test_non_finite_numbers_are_named_beside_other_errors():
    msg = str(pytest.raises(ConfigError, load_config, None, ["runtime.steps=0", "training.betas=[0.9,inf]"]).value)
    assert "runtime.steps = 0" in msg and "training.betas.1 = inf: must be a finite number" in msg


def test_training_refuses_top_p_on_every_engine_kind():
    # no engine reports log-probs of the top-p-truncated distribution (config.ROLLOUT_LOGPROBS): all refuse
    import typing

    from fireflash.config import check_trainable_sampling
    from fireflash.engines.config import EngineConfig

    check_trainable_sampling(build_config({}))  # the recipe's sampling (top_p = 1, temperature = 1) trains
    for kind in typing.get_args(EngineConfig.model_fields["kind"].annotation):
        cfg = build_config({"harness": {"sampling": {"top_p": 0.95}}, "engine": {"kind": kind}})
        with pytest.raises(ConfigError, match=r"^harness\.sampling\.top_p = 0\.95: .* set harness\.sampling\.top_p = 1"):
            check_trainable_sampling(cfg)
        with pytest.raises(ConfigError, match=r"^harness\.sampling\.top_p = 0\.95: probing runs under the training"):
            check_trainable_sampling(cfg, probing=True)
