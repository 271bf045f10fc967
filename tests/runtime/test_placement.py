"""Ray placement arithmetic and the `train --dry-run` plan: pure config, no Ray, no model."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fireflash.cli import app
from fireflash.config import ConfigError, load_config
from fireflash.engines.config import EngineConfig
from fireflash.runtime.config import RayConfig
from fireflash.cli.train import check_train_config, describe_plan
from fireflash.runtime.placement import PlacementError, plan_placement

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def test_cluster_config_splits_gpus_half_and_half():
    cfg = load_config(REPO / "configs/cluster.toml")
    p = plan_placement(cfg.runtime.ray, cfg.engine, cfg.runtime.max_inflight_attempts)
    assert (p.trainer_workers, p.gpus_per_trainer_worker, p.trainer_gpus) == (32, 1, 32)
    assert (p.engines, p.gpus_per_engine, p.engines_in_workers) == (4, 8, False)  # tp-size 8 from engine.args
    assert (p.rollout_workers, p.attempts_per_worker) == (64, 8)
    lines = p.describe()
    assert "nodes 0–3" in lines[1] and "nodes 4–7" in lines[2]


def test_dry_run_prints_the_placement_without_starting_anything(tmp_path):
    # the cluster config with a model and no pool manifest here, so the run's own checks pass too
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    text = (REPO / "configs/cluster.toml").read_text().replace("/models/your-model", str(model))
    config = tmp_path / "cluster.toml"
    config.write_text("\n".join(line for line in text.splitlines() if not line.startswith("pool_manifest")))
    result = CliRunner().invoke(app, ["train", "-c", str(config), "--dry-run", f"tracking.run_dir={tmp_path / 'run'}"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())  # rich wraps long lines
    assert "join the Ray cluster at auto" in out and "32 worker(s) × 1 GPU" in out and "4 × sglang × 8 GPUs" in out
    assert "64 × 4 CPU" in out and "ready: " in out and not (tmp_path / "run").exists()


def test_split_that_leaves_a_role_without_gpus_is_refused():
    ray = RayConfig(num_nodes=1, gpus_per_node=2, trainer_gpu_share=0.9)
    with pytest.raises(PlacementError, match="trainer_gpu_share = 0.9 .* rollout engines no GPU"):
        plan_placement(ray, EngineConfig(kind="sglang"), 16)
    with pytest.raises(PlacementError, match="num_trainer_workers = 3 does not divide the 4 trainer GPUs"):
        plan_placement(RayConfig(num_nodes=1, gpus_per_node=8, num_trainer_workers=3), EngineConfig(kind="sglang"), 16)
    with pytest.raises(PlacementError, match="do not split into engines of 8 GPUs"):
        plan_placement(RayConfig(num_nodes=1, gpus_per_node=8), EngineConfig(kind="sglang", args={"tp-size": 8}), 16)
    result = CliRunner().invoke(app, ["train", "-c", str(REPO / "configs/cluster.toml"), "--dry-run",
                                      "runtime.ray.trainer_gpu_share=0.3"])
    assert result.exit_code == 2 and "PlacementError" in result.output and "trainer_gpu_share" in result.output


def test_local_engines_live_in_rollout_workers():
    p = plan_placement(RayConfig(num_rollout_workers=2), EngineConfig(kind="local"), 5)
    assert (p.trainer_workers, p.engines, p.gpus_per_engine, p.engines_in_workers) == (1, 2, 0, True)
    assert p.attempts_per_worker == 3
    p = plan_placement(RayConfig(num_nodes=2, gpus_per_node=2, num_rollout_workers=2), EngineConfig(kind="local"), 4)
    assert (p.trainer_workers, p.engines, p.gpus_per_engine) == (2, 2, 1)
    assert "object store" in p.describe()[-1]


def test_engine_servers_take_weights_by_collective_or_disk():
    p = plan_placement(RayConfig(num_nodes=8, gpus_per_node=8), EngineConfig(kind="sglang", args={"tp-size": 8}), 64)
    assert "one broadcast through a weight-update group (NCCL, 8 rank(s) per server)" in p.describe()[-1]
    cpu = plan_placement(RayConfig(num_engines=3, num_cpus_per_engine=2), EngineConfig(kind="sglang", weight_sync="disk"), 8)
    assert (cpu.engines, cpu.gpus_per_engine, cpu.cpus_per_engine, cpu.engines_in_workers) == (3, 0, 2.0, False)
    assert "HF directory each server loads" in cpu.describe()[-1]
    gloo = plan_placement(RayConfig(), EngineConfig(kind="sglang"), 8)
    assert gloo.engines == 1 and "(gloo, 1 rank(s) per server)" in gloo.describe()[-1]


def test_vllm_servers_are_placed_on_ray_with_the_same_checks_as_sglang():
    """Issue 31: vLLM is a training engine on Ray too (it was refused); its transfer backend must be the trainer's."""
    p = plan_placement(RayConfig(num_nodes=2, gpus_per_node=8), EngineConfig(kind="vllm", args={"tp-size": 4}), 16)
    assert (p.engines, p.gpus_per_engine, p.engines_in_workers) == (2, 4, False)
    assert "vLLM's weight-transfer group (NCCL, 4 rank(s) per server)" in p.describe()[-1]
    with pytest.raises(PlacementError, match="do not split into engines of 3 GPUs"):  # SGLang's check
        plan_placement(RayConfig(num_nodes=1, gpus_per_node=8), EngineConfig(kind="vllm", args={"tp-size": 3}), 16)
    with pytest.raises(PlacementError, match="weight_transfer_config = {backend = 'nccl'}"):
        plan_placement(RayConfig(num_nodes=1, gpus_per_node=8),
                       EngineConfig(kind="vllm", args={"weight_transfer_config": {"backend": "gloo"}}), 16)
    with pytest.raises(PlacementError, match="engine.weight_sync = 'collective'"):
        plan_placement(RayConfig(num_nodes=1, gpus_per_node=8), EngineConfig(kind="vllm", weight_sync="disk"), 16)
    with pytest.raises(PlacementError, match="vLLM stand-in runs in process only"):
        plan_placement(RayConfig(num_nodes=1, gpus_per_node=8), EngineConfig(kind="vllm", server="fireflash"), 16)
    with pytest.raises(PlacementError, match="without GPUs .* vLLM's weight transfer is NCCL"):
        plan_placement(RayConfig(), EngineConfig(kind="vllm"), 8)
    # a CPU cluster: vLLM servers started elsewhere (the stand-in), over the gloo stand-in of vLLM's group
    cpu = plan_placement(RayConfig(), EngineConfig(kind="vllm", url="http://h:8000", server="fireflash",
                                                   args={"weight_transfer_config": {"backend": "gloo"}}), 8)
    assert "vLLM's weight-transfer group (gloo, 1 rank(s) per server)" in cpu.describe()[-1]
    # by config, as fireflash train --dry-run reads it: the training checks pass and the plan places vLLM servers
    cfg = load_config(None, ["runtime.backend=ray", "engine.kind=vllm", "runtime.ray.num_nodes=1",
                             "runtime.ray.gpus_per_node=8", "runtime.max_inflight_attempts=16"])
    check_train_config(cfg)
    assert "4 × vllm × 1 GPU" in describe_plan(cfg)


def test_more_rollout_workers_than_attempts_is_a_config_error():
    with pytest.raises(ConfigError, match="num_rollout_workers \\(8\\) > runtime.max_inflight_attempts \\(4\\)"):
        load_config(None, ["runtime.backend=ray", "runtime.ray.num_rollout_workers=8",
                           "runtime.max_inflight_attempts=4"])
    plan = describe_plan(load_config(None, ["runtime.backend=ray"]))
    assert "start a local Ray instance" in plan and "CPU only" in plan
