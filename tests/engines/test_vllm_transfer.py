"""The trainer's end of vLLM's weight transfer (engines/vllm_transfer.py, issue 31), and the GPU check's skip line."""

from __future__ import annotations

import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

from fireflash.engines.vllm_transfer import VLLMTrainerTransfer, gloo_broadcast, stateless_gloo_group
from fireflash.training.fsdp import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_vllm(monkeypatch):
    """vLLM's NCCLWeightTransferEngine as its trainer side is called (nccl_engine.py: two static methods)."""
    calls = []

    class NCCLWeightTransferEngine:
        @staticmethod
        def trainer_init(init_info):
            calls.append(("init", init_info))
            return "communicator"

        @staticmethod
        def trainer_send_weights(iterator, trainer_args):
            calls.append(("send", [(n, t.dtype) for n, t in iterator], trainer_args))

    module = types.ModuleType("vllm.distributed.weight_transfer.nccl_engine")
    module.NCCLWeightTransferEngine = NCCLWeightTransferEngine
    for name in ("vllm", "vllm.distributed", "vllm.distributed.weight_transfer"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    # no CUDA here: moving to a device is the identity, a dtype cast still casts
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: self if not a or not isinstance(a[0], torch.dtype)
                        else torch.Tensor.type(self, a[0]))
    return calls


def test_nccl_uses_vllms_own_trainer_side(fake_vllm):
    transfer = VLLMTrainerTransfer("nccl", packed=True, dtype=torch.bfloat16)
    transfer.join("10.0.0.2", 29501, world_size=3)
    transfer.send([("w", torch.zeros(2)), ("step", torch.zeros(1, dtype=torch.int64))])
    assert fake_vllm == [
        ("init", {"master_address": "10.0.0.2", "master_port": 29501, "world_size": 3}),
        ("send", [("w", torch.bfloat16), ("step", torch.int64)], {"group": "communicator", "packed": True}),
    ]


def test_gloo_stand_in_sends_each_tensor_in_order():
    port, got = free_port(), {}

    def server():
        group = stateless_gloo_group("127.0.0.1", port, 1, 2, 30)
        for name, shape in (("a", (2, 2)), ("b", (3,))):
            got[name] = torch.empty(shape)
            gloo_broadcast(group, got[name])

    thread = threading.Thread(target=server)
    thread.start()
    transfer = VLLMTrainerTransfer("gloo")
    transfer.join("127.0.0.1", port, 2, 30)
    transfer.send([("a", torch.ones(2, 2)), ("b", torch.arange(3.0))])
    thread.join(30)
    assert torch.equal(got["a"], torch.ones(2, 2)) and torch.equal(got["b"], torch.arange(3.0))


def test_bad_settings_name_the_fix():
    with pytest.raises(ValueError, match="'nccl'"):
        VLLMTrainerTransfer("ipc")
    with pytest.raises(ValueError, match="packed"):
        VLLMTrainerTransfer("gloo", packed=True)
    with pytest.raises(RuntimeError, match="before join"):
        VLLMTrainerTransfer("gloo").send([("a", torch.ones(1))])


def test_gpu_check_says_it_did_not_run(tmp_path):
    """benchmarks/gpu/engine_check.sh on a machine without a GPU or an engine: a SKIPPED line, exit 0."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexit 9\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "PY": sys.executable, "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(ROOT / "benchmarks/gpu/engine_check.sh")], env=env, capture_output=True, check=False,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("SKIPPED: engine_check did not run: no CUDA GPU")
