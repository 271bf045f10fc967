"""vLLM is accepted as a training engine by config, with the same checks as SGLang (issue 31)."""

from __future__ import annotations

import pytest

from fireflash.config import ConfigError, load_config
from fireflash.engines import make_engine
from fireflash.engines.config import EngineConfig
from fireflash.engines.vllm import weight_transfer_backend
from fireflash.runtime.job import check_train_config

URL = "engine.url=http://127.0.0.1:9"


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_a_server_with_a_url_is_accepted_for_training(kind):
    check_train_config(load_config(None, [f"engine.kind={kind}", URL, "engine.weight_sync_timeout_sec=900"]))


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
@pytest.mark.parametrize("overrides,error", [
    ([], "on runtime.backend = 'local' needs engine.url"),
    ([URL, "engine.weight_sync_timeout_sec=300"], "engine.weight_sync_timeout_sec (300) must exceed"),
], ids=["no-url", "short-sync-timeout"])
def test_both_server_kinds_get_the_same_checks(kind, overrides, error):
    with pytest.raises(ConfigError) as e:
        check_train_config(load_config(None, [f"engine.kind={kind}", *overrides]))
    assert error in str(e.value)


def test_vllm_refuses_disk_weight_sync():
    with pytest.raises(ConfigError, match="vLLM's RL routes take new weights only through its weight-transfer group"):
        check_train_config(load_config(None, ["engine.kind=vllm", URL, "engine.weight_sync=disk"]))


@pytest.mark.parametrize("args,backend", [
    ({}, "nccl"),
    ({"weight_transfer_config": {"backend": "gloo"}}, "gloo"),
    ({"weight_transfer_config": '{"backend": "ipc"}'}, "ipc"),
])
def test_the_client_reads_the_transfer_backend_from_the_launch_flags(args, backend):
    """engine.args feeds both `vllm serve` (launch_vllm) and the client's trainer-side group, so they agree."""
    assert weight_transfer_backend(args) == backend
    engine = make_engine(EngineConfig(kind="vllm", url="http://127.0.0.1:1", served_model_name="m", args=args), "m")
    assert engine.transfer_backend == backend


def test_a_malformed_transfer_config_names_the_field():
    with pytest.raises(TypeError, match="engine.args.weight_transfer_config"):
        weight_transfer_backend({"weight_transfer_config": "nccl"})
