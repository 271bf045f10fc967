"""Reading trainer weights for an engine: a state dict, or an HF model directory of safetensors files; the
``TensorSpec`` list that tells a receiver what a weight broadcast will carry."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import torch

Broadcast = Callable[[list[tuple[str, torch.Tensor]]], None]
"""Trainer-side weight sender for HTTP engines: sends each (name, tensor), in order, over the weight-update
group (NCCL broadcast or IPC handles) while the server receives; blocking."""


class TensorSpec(NamedTuple):
    """One tensor of an update: name, dtype name (e.g. 'float32', as ``torch.float32`` without 'torch.'), shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]


def specs_of(named: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> list[TensorSpec]:
    """The ``TensorSpec`` of each tensor, in order: what a receiver allocates before a broadcast of ``named``
    (a state dict or (name, tensor) pairs). Reads only metadata: no copy, no device transfer."""
    pairs = named.items() if isinstance(named, Mapping) else named
    return [TensorSpec(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in pairs]


class WeightUpdateError(ValueError):
    """New weights do not fit the engine's model; the message names the tensors and the fix."""


def read_weights(weights: Mapping[str, torch.Tensor] | Path | str) -> dict[str, torch.Tensor]:
    """A private CPU copy of ``weights`` (a state dict, or an HF directory with ``*.safetensors``).

    Copied so the trainer may keep stepping its tensors while requests on older weights still run.

    Raises:
        WeightUpdateError: the directory holds no safetensors file.
    """
    if isinstance(weights, (str, Path)):
        from safetensors.torch import load_file

        directory = Path(weights)
        files = sorted(directory.glob("*.safetensors"))
        if not files:
            raise WeightUpdateError(
                f"{directory}: no *.safetensors file; save the trainer's model with save_pretrained(..., "
                "safe_serialization=True) or pass a state dict"
            )
        out: dict[str, torch.Tensor] = {}
        for f in files:
            out.update(load_file(str(f)))
        return out
    return {name: t.detach().to("cpu", copy=True) for name, t in weights.items()}


def check_weights(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Check that ``state`` can replace ``model``'s weights, without changing anything.

    Tied parameters (SmolLM2 ties ``lm_head.weight`` to ``model.embed_tokens.weight``) count as present
    when any of their names is given.

    Raises:
        WeightUpdateError: unknown names, missing parameters, or shape mismatches (all listed).
    """
    own = model.state_dict()
    unknown = sorted(set(state) - set(own))
    if unknown:
        raise WeightUpdateError(
            f"weights name {len(unknown)} tensors the model lacks: {unknown[:5]} (same architecture?)"
        )
    bad = [
        f"{n}: {tuple(t.shape)} vs model {tuple(own[n].shape)}"
        for n, t in state.items()
        if t.shape != own[n].shape
    ]
    if bad:
        raise WeightUpdateError(f"weight shapes differ: {bad[:5]}")
    by_storage: dict[int, set[str]] = {}
    for name, t in own.items():
        by_storage.setdefault(t.data_ptr(), set()).add(name)
    missing = sorted(min(names) for names in by_storage.values() if not names & set(state))
    if missing:
        raise WeightUpdateError(
            f"weights miss {len(missing)} tensors: {missing[:5]}; send the full state dict"
        )


def install_weights(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model`` in place, casting to the model's dtypes (``check_weights`` first).

    Raises:
        WeightUpdateError: see ``check_weights``.
    """
    check_weights(model, state)
    own = model.state_dict()
    with torch.no_grad():
        for name, t in state.items():
            own[name].copy_(t)
