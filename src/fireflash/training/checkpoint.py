"""Atomic, HF-loadable checkpoints with everything `--resume` needs.

    run_dir/checkpoints/
      step-000004/               a normal HF model directory (transformers, SGLang, vLLM load it)
        config.json  model.safetensors  generation_config.json  tokenizer files
        trainer_state.pt         optimizer state, RNG states
        fireflash.json           step, weight_version, data cursor (schema_version)
      latest                     name of the newest complete checkpoint

A checkpoint is written into a hidden sibling and renamed into place, and ``latest`` is replaced
atomically after it, so a kill -9 at any moment leaves the previous checkpoint usable.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SCHEMA_VERSION = 1


class CheckpointError(RuntimeError):
    """No checkpoint to resume from, or one that is incomplete or from a newer FireFlash."""


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    weight_version: int,
    cursor: dict[str, Any],
    keep: int,
    *,
    model_state: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Write ``root/step-{step:06d}`` atomically, point ``latest`` at it, prune to ``keep`` checkpoints.

    ``model_state`` / ``optimizer_state`` replace ``model.state_dict()`` / ``optimizer.state_dict()`` when a
    sharded trainer has gathered them (``training.fsdp``).
    """
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    final, tmp = root / name, root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True, state_dict=model_state)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    optimizer_state = optimizer.state_dict() if optimizer_state is None else optimizer_state
    torch.save({"optimizer": optimizer_state, "rng": _rng_state()}, tmp / "trainer_state.pt")
    meta = {"schema_version": SCHEMA_VERSION, "step": step, "weight_version": weight_version, "cursor": cursor}
    (tmp / "fireflash.json").write_text(json.dumps(meta, indent=1))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(name)
    os.replace(latest_tmp, root / "latest")
    for old in sorted(p for p in root.glob("step-*") if p.is_dir())[:-keep]:
        shutil.rmtree(old)
    return final


def latest_checkpoint(root: Path) -> Path:
    """The newest complete checkpoint under ``root``.

    Raises:
        CheckpointError: none exists.
    """
    pointer = root / "latest"
    if not pointer.is_file() or not (root / pointer.read_text().strip() / "fireflash.json").is_file():
        raise CheckpointError(f"no checkpoint under {root}; start without --resume")
    return root / pointer.read_text().strip()


def load_checkpoint_state(
    path: Path, optimizer: torch.optim.Optimizer, load_optimizer: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Restore optimizer and RNG state from ``path``; return its ``fireflash.json`` metadata.

    The model weights are loaded separately, as a normal HF directory (``fireflash.models.load_policy``).
    ``load_optimizer`` replaces ``optimizer.load_state_dict`` (a sharded trainer scatters the saved state).

    Raises:
        CheckpointError: a newer schema or a missing trainer_state.pt.
    """
    meta = json.loads((path / "fireflash.json").read_text())
    if meta.get("schema_version", 0) > SCHEMA_VERSION:
        raise CheckpointError(f"{path}/fireflash.json: schema_version {meta['schema_version']} is newer than {SCHEMA_VERSION}")
    state_file = path / "trainer_state.pt"
    if not state_file.is_file():
        raise CheckpointError(f"{state_file} missing: the checkpoint is incomplete")
    state = torch.load(state_file, weights_only=False)
    (load_optimizer or optimizer.load_state_dict)(state["optimizer"])
    _set_rng_state(state["rng"])
    return meta
