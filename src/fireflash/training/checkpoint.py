"""Atomic, HF-loadable checkpoints with everything `--resume` needs.

    run_dir/checkpoints/
      step-000004/               a normal HF model directory (transformers, SGLang, vLLM load it)
        config.json  model.safetensors  generation_config.json  tokenizer files
        trainer_state.pt         optimizer state, RNG states
        fireflash.json           step, weight_version, data cursor (schema_version)
      step-000006/               a sharded checkpoint (training.sharded_checkpoints): config.json, tokenizer
        dcp/                     files, fireflash.json and torch.distributed.checkpoint shards, no HF weights;
        hf/                      written from the shards on --resume (``resume_model_dir``) for the engines
      latest                     name of the newest complete checkpoint

Every writer (the single-process trainer, FSDP's gathered and sharded checkpoints, SFT) goes through
``stage_checkpoint`` → write → ``commit_checkpoint``: the step is written into a hidden sibling, every file and
directory is fsynced, the directory is renamed into place and only then is ``latest`` repointed (written under
a temporary name, fsynced, one ``os.replace``, parent directory fsynced). ``latest`` therefore names a complete
checkpoint at every instant, and a kill -9 at any moment leaves a usable one. Replacing an existing step
directory (a resumed run saving a step that a killed run had saved) first points ``latest`` at a hard-linked
copy of the old directory, so the visible ``step-N`` goes old → absent → new, never a mix.
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


def checkpoint_name(step: int) -> str:
    """``step-000004``: the directory name of step ``step``'s checkpoint (sorts by step)."""
    return f"step-{step:06d}"


def staging_dir(root: Path, step: int) -> Path:
    """The hidden directory step ``step``'s checkpoint is written into before ``commit_checkpoint``."""
    return root / f".{checkpoint_name(step)}.tmp"


def stage_checkpoint(root: Path, step: int) -> Path:
    """Create an empty ``staging_dir(root, step)`` (removing what interrupted saves left); returns it.

    One process per run calls it (rank 0 of a sharded trainer; the others write into the same path).
    """
    root.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(root)
    staged = staging_dir(root, step)
    staged.mkdir()
    return staged


def commit_checkpoint(root: Path, step: int, keep: int) -> Path:
    """Make the fully written ``staging_dir(root, step)`` the checkpoint ``latest`` names; prune to ``keep``.

    Order (module docstring): fsync the staged tree, rename it to ``step-NNNNNN`` (an existing one is first
    taken out of ``latest``'s way, see below), fsync ``root``, repoint ``latest``, delete what is no longer
    named. Returns the checkpoint's directory.
    """
    name = checkpoint_name(step)
    final, staged = root / name, staging_dir(root, step)
    _fsync_tree(staged)
    if final.exists():
        if _read_latest(root) == name:
            # latest must name a complete directory while step-N is swapped: a hard-linked copy of the old one
            # (no data is copied) holds it until the new one is in place
            held = root / f".{name}.old"
            shutil.rmtree(held, ignore_errors=True)
            shutil.copytree(final, held, copy_function=_link_or_copy)
            _fsync_tree(held)
            _point_latest(root, held.name)
        _discard(final)
    os.replace(staged, final)
    _fsync_dir(root)
    _point_latest(root, name)
    _remove_leftovers(root)
    for old in sorted(p for p in root.glob("step-*") if p.is_dir())[:-keep]:
        if old != final:
            _discard(old)
    return final


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
    tmp = stage_checkpoint(root, step)
    model.save_pretrained(tmp, safe_serialization=True, state_dict=model_state)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    optimizer_state = optimizer.state_dict() if optimizer_state is None else optimizer_state
    torch.save({"optimizer": optimizer_state, "rng": _rng_state()}, tmp / "trainer_state.pt")
    meta = {"schema_version": SCHEMA_VERSION, "step": step, "weight_version": weight_version, "cursor": cursor}
    (tmp / "fireflash.json").write_text(json.dumps(meta, indent=1))
    return commit_checkpoint(root, step, keep)


def _read_latest(root: Path) -> str | None:
    pointer = root / "latest"
    return pointer.read_text().strip() if pointer.is_file() else None


def _point_latest(root: Path, name: str) -> None:
    """Repoint ``latest`` in one ``os.replace`` of a fsynced file: readers see the old name or the new one."""
    tmp = root / ".latest.tmp"
    with open(tmp, "w") as f:
        f.write(name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / "latest")
    _fsync_dir(root)


def _discard(path: Path) -> None:
    """Delete a checkpoint directory so that it vanishes at once: renamed to a hidden name, then removed."""
    trash = path.parent / f".{path.name}.trash"
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash)


def _remove_leftovers(root: Path) -> None:
    """Hidden directories of interrupted saves (staged, held, discarded), except one ``latest`` still names."""
    named = _read_latest(root)
    for path in root.glob(".step-*"):
        if path.is_dir() and path.name != named:
            shutil.rmtree(path, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # a filesystem without hard links
        shutil.copy2(src, dst)


def _fsync_tree(path: Path) -> None:
    """fsync every file under ``path``, then every directory (children before parents), so a rename of
    ``path`` that survives a power loss also finds its contents."""
    for directory, _, files in os.walk(path, topdown=False):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(directory))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def latest_checkpoint(root: Path) -> Path:
    """The newest complete checkpoint under ``root`` (the directory ``latest`` names; after a kill in the middle
    of replacing step-N, the hidden ``.step-N.old`` copy that held the old one).

    Raises:
        CheckpointError: none exists.
    """
    name = _read_latest(root)  # read once: a writer may repoint it meanwhile
    if name is None or not (root / name / "fireflash.json").is_file():
        raise CheckpointError(f"no checkpoint under {root}; start without --resume")
    return root / name


def load_checkpoint_state(
    path: Path, optimizer: torch.optim.Optimizer, load_optimizer: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Restore optimizer and RNG state from ``path``; return its ``fireflash.json`` metadata.

    The model weights are loaded separately, as a normal HF directory (``fireflash.models.load_policy``).
    ``load_optimizer`` replaces ``optimizer.load_state_dict`` (a sharded trainer scatters the saved state).

    Raises:
        CheckpointError: a newer schema or a missing trainer_state.pt.
    """
    meta = read_checkpoint_meta(path)
    state_file = path / "trainer_state.pt"
    if not state_file.is_file():
        raise CheckpointError(f"{state_file} missing: the checkpoint is incomplete")
    state = torch.load(state_file, weights_only=False)
    (load_optimizer or optimizer.load_state_dict)(state["optimizer"])
    _set_rng_state(state["rng"])
    return meta


def read_checkpoint_meta(path: Path) -> dict[str, Any]:
    """``path/fireflash.json``: step, weight_version, cursor, schema_version ("sharded": true for DCP shards).

    Raises:
        CheckpointError: a newer schema than this FireFlash reads.
    """
    meta = json.loads((path / "fireflash.json").read_text())
    if meta.get("schema_version", 0) > SCHEMA_VERSION:
        raise CheckpointError(f"{path}/fireflash.json: schema_version {meta['schema_version']} is newer than {SCHEMA_VERSION}")
    return meta


def is_sharded(path: Path) -> bool:
    """Whether checkpoint ``path`` holds torch.distributed.checkpoint shards (``dcp/``) instead of HF weights."""
    return (path / "dcp").is_dir()


def load_sharded_state(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Load a sharded checkpoint's weights and optimizer state into ``model`` / ``optimizer``; returns its metadata.

    Works at any world size: with a default process group (``FSDPTrainer``, collective) every rank reads its
    own shards; without one (the single-process ``Trainer``) the whole state is read. Weights and optimizer
    state are keyed by parameter name, so the saving world size does not matter.

    Raises:
        CheckpointError: a newer schema.
    """
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    meta = read_checkpoint_meta(path)
    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
    _load_shards(state, path / "dcp")
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optimizer"])
    return meta


def resume_model_dir(root: Path) -> Path:
    """The HF model directory ``--resume`` starts the engines and the trainer from: the latest checkpoint under
    ``root``, or for a sharded one its ``hf/`` view, written once from the shards' weights.

    Why write it: engines (in-process or servers) load an HF directory, and a sharded checkpoint has none. The
    trainer then restores weights and optimizer from the shards themselves (``load_sharded_state``).
    Simplification (named): the view holds the full weights in one process's memory while it is written, as
    the trainer's rank 0 does for every weight sync anyway. Call it from one process (the driver).

    Raises:
        CheckpointError: no checkpoint under ``root`` (``latest_checkpoint``).
    """
    path = latest_checkpoint(root)
    if not is_sharded(path):
        return path
    view = path / "hf"
    if view.is_dir():  # written by an earlier resume (renamed into place only once complete)
        return view
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from transformers import AutoConfig, AutoModelForCausalLM

    shards = str(path / "dcp")
    prefix = "model."  # the writer saves {"model": ..., "optimizer": ...}; DCP flattens keys with dots
    weights = {
        key[len(prefix):]: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in FileSystemReader(shards).read_metadata().state_dict_metadata.items()
        if key.startswith(prefix) and isinstance(meta, TensorStorageMetadata)
    }
    _load_shards({"model": weights}, path / "dcp", alone=True)
    tmp = path / ".hf.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for item in path.iterdir():  # config and tokenizer files
        if item.is_file() and item.name != "fireflash.json":
            shutil.copy2(item, tmp / item.name)
    with torch.device("meta"):  # only the class and config: the weights are the shards'
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    model.save_pretrained(tmp, safe_serialization=True, state_dict=weights)
    _fsync_tree(tmp)
    os.replace(tmp, view)
    _fsync_dir(path)
    return view


def _load_shards(state: dict[str, Any], shards: Path, alone: bool = False) -> None:
    """``dcp.load`` into ``state``: collective when a default process group exists (unless ``alone``), else
    in this process alone."""
    import warnings

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # reading in one process is meant here, not a missing process group
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(shards), no_dist=alone or not dist.is_initialized())
