"""The training recipe: full-parameter AdamW on the objective of RECIPE.md §5, one update per step.

    trainer = Trainer(model, tokenizer, TrainerConfig(), ObjectiveConfig(), temperature=1.0)
    metrics = trainer.train_step(groups)       # groups carry advantages (rl.advantages)
    trainer.save_checkpoint(run_dir / "checkpoints", cursor={...})
    engine.update_weights(trainer.state_dict(), trainer.weight_version)

Precision (``training.dtype``), as ``training.fsdp`` does it: the weights and AdamW state stay in the model's
dtype (builders load fp32: an update of lr 1e-6 vanishes in bf16 weights), and the forward runs under
``torch.autocast`` in the compute dtype — bf16 on CUDA ('auto' or 'bfloat16'), fp32 on CPU ('auto' or
'float32'). 'bfloat16' on CPU is honoured (autocast) but slow (bf16 matmul ~70x slower on AVX2 CPUs). The
vocabulary projection runs in the compute dtype too; log-probs are fp32 (``rl.logprobs``). Builders place the
trainer with ``device=default_device()`` (CUDA when present); ``state_dict`` hands out CPU copies.

Simplifications (named, as nanochat does): no learning-rate schedule (the recipe states none); micro-
batches are padded rather than packed with per-sequence attention masks (padding waste is bounded by
packing longest-first).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fireflash.protocols import Group
from fireflash.rl.config import ObjectiveConfig
from fireflash.rl.metrics import add_micro_batch_metrics, finish_micro_batch_metrics
from fireflash.rl.objective import objective_loss
from fireflash.training.batch import AllTokensStale, MicroBatch, count_fresh_tokens, pack_groups, to_device
from fireflash.training.checkpoint import (
    is_sharded,
    latest_checkpoint,
    load_checkpoint_state,
    load_sharded_state,
    save_checkpoint,
)
from fireflash.training.config import TrainerConfig
from fireflash.training.prefix import shared_prefix_hidden


def default_device() -> torch.device:
    """Where builders put the single-process trainer: CUDA when present, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def compute_dtype(dtype: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype ``training.dtype`` asks for on ``device``; None: compute in the weights' dtype.

    'auto': bf16 on CUDA, none elsewhere (fp32 on CPU); 'bfloat16': bf16 anywhere (slow on CPU); 'float32': none.
    """
    if dtype == "bfloat16" or (dtype == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def micro_batch_loss(
    model: torch.nn.Module,
    mb: MicroBatch,
    weight_version: int,
    temperature: float,
    objective: ObjectiveConfig,
    compute: torch.dtype | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """RECIPE.md §5 loss of one micro-batch: the model body, then the LM head only at sampled positions.

    Args:
        model: causal LM with ``model.model`` (body) and ``lm_head`` (no bias).
        mb: ``MicroBatch`` (prefix_ids [P], input_ids / attention_mask [S, L], rows / cols [T]) on the model's
            device; a shared prefix runs once, with gradient (``training.prefix``).
        weight_version: the trainer's version (staleness of each token is measured against it).
        temperature: rollout sampling temperature.
        objective: the RECIPE.md §5 constants.
        compute: autocast dtype of the body and the LM head (``compute_dtype``); None runs them in the
            weights' dtype.

    Returns:
        ``objective_loss``'s (loss scalar, metrics).
    """
    with torch.autocast(mb.input_ids.device.type, dtype=compute, enabled=compute is not None):
        if mb.prefix_ids.numel():
            hidden = shared_prefix_hidden(model, mb.prefix_ids, mb.input_ids, prefix_grad=True)
        else:
            hidden = model.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).last_hidden_state
    hidden, weight = hidden[mb.rows, mb.cols], model.lm_head.weight
    if compute is not None:  # the head in the compute dtype as well (as FSDP2's bf16 parameters); logits upcast
        hidden, weight = hidden.to(compute), weight.to(compute)
    return objective_loss(hidden, weight, mb.policy, weight_version, temperature, objective)


class Trainer:
    """Owns the policy being trained, its optimizer and its weight version.

    Args:
        model: a causal LM with ``model.model`` (the body returning ``last_hidden_state``) and
            ``lm_head`` (no bias), as transformers' Llama / Qwen / SmolLM2 classes have.
        tokenizer: saved into every checkpoint so it is a complete HF model directory.
        cfg: optimizer and micro-batch settings.
        objective: the RECIPE.md §5 constants.
        temperature: the rollout sampling temperature; the trainer's log-probs use the same.
        weight_version: version of ``model``'s current weights (0 for the base model).
        device: where the model is moved and trained (``default_device()`` in the builders); None: where its
            parameters already are. With ``cfg.dtype`` it sets the compute dtype (module docstring).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        cfg: TrainerConfig,
        objective: ObjectiveConfig,
        temperature: float,
        weight_version: int = 0,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        if temperature <= 0:
            raise ValueError(f"harness.sampling.temperature={temperature}: RL needs sampling (> 0) for importance ratios")
        if device is not None:
            model.to(device)
        self.device = next(model.parameters()).device
        self.compute_dtype = compute_dtype(cfg.dtype, self.device)
        self.model, self.tokenizer, self.cfg, self.objective = model, tokenizer, cfg, objective
        self.temperature = temperature
        self.weight_version = weight_version
        self.step = 0
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else 0

    def train_step(self, groups: Sequence[Group]) -> dict[str, float]:
        """One optimizer update on ``groups`` (RECIPE.md §5: one update per step, no KL, no entropy bonus).

        Returns ``accumulate_gradients``' metrics plus ``grad_norm`` (before clipping) and ``step_sec``;
        bumps ``weight_version`` and ``step``.

        Raises:
            fireflash.training.batch.BatchError: unpackable data (see ``pack_groups``), among it
                ``NoSampledTokens``: nothing to learn from, so no update and no new version (the weights would
                not change, yet the bump would age every turn in flight by one version for staleness).
                Raised before any state changes; the runtimes never queue such groups (``finish_group``).
            fireflash.training.batch.AllTokensStale: (a ``NoSampledTokens``) every sampled token is more than
                ``objective.max_staleness`` versions behind; no optimizer step (AdamW's momentum would still move
                the weights), no new version. Raised before any state changes; the runtimes count it as a
                skipped step (``trainer/skipped_steps``).
        """
        start = time.perf_counter()
        sampled, fresh = self.count_fresh_tokens(groups)
        if sampled and not fresh:
            raise AllTokensStale(
                f"{len(groups)} group(s): all {sampled} policy-sampled tokens are more than rl.max_staleness="
                f"{self.objective.max_staleness} versions behind weight version {self.weight_version}; the loss masks "
                "every one, so the step is skipped (no optimizer step, no new version)"
            )
        metrics = self.accumulate_gradients(groups)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.weight_version += 1
        return metrics | {"grad_norm": float(grad_norm), "step_sec": time.perf_counter() - start}

    def count_fresh_tokens(self, groups: Sequence[Group]) -> tuple[int, int]:
        """(policy-sampled tokens, those within ``objective.max_staleness`` of ``weight_version``) of ``groups``."""
        return count_fresh_tokens(groups, self.weight_version, self.objective.max_staleness)

    def accumulate_gradients(self, groups: Sequence[Group]) -> dict[str, float]:
        """Forward/backward every micro-batch of ``groups`` into ``.grad`` (no optimizer step).

        Turns more than ``objective.max_staleness`` versions behind ``weight_version`` are masked out.
        Returns the objective's metrics (weighted by sampled tokens over micro-batches), ``loss``,
        ``tokens/n`` and ``micro_batches``.
        """
        micro = self.pack(groups)
        self.model.train()
        n_tokens = sum(mb.policy.target_ids.numel() for mb in micro)
        totals = self.backward_micro_batches(micro, n_tokens)
        self.model.eval()
        return finish_micro_batch_metrics(totals) | {"tokens/n": float(n_tokens), "micro_batches": float(len(micro))}

    def pack(self, groups: Sequence[Group]) -> list[MicroBatch]:
        """``pack_groups`` with this trainer's budget, top-K and pad id (raises ``BatchError``)."""
        return pack_groups(
            groups, self.cfg.micro_batch_tokens, self.objective.score_centering_topk, self.pad_id, self.cfg.share_prefix
        )

    def backward_micro_batches(self, micro: Sequence[MicroBatch], n_tokens: int) -> dict[str, float]:
        """Forward/backward each of ``micro``; metrics in the summable form of ``add_micro_batch_metrics``.

        ``n_tokens`` counts the sampled positions of the whole step, so totals of disjoint subsets of its
        micro-batches (one per data-parallel rank) add up to the totals of the step; the caller finishes them
        with ``finish_micro_batch_metrics``.
        """
        totals: dict[str, float] = {"loss": 0.0}
        for mb in micro:
            if not mb.policy.target_ids.numel():
                continue
            loss, metrics = self.micro_batch_loss(mb)
            loss.backward()  # micro-batch losses sum to the step loss (per-attempt floors are step-wide)
            totals["loss"] += loss.item()
            add_micro_batch_metrics(totals, metrics, mb.policy.target_ids.numel() / max(n_tokens, 1))
        return totals

    def micro_batch_loss(self, mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """The objective on one micro-batch at the current ``weight_version`` (no backward)."""
        return micro_batch_loss(
            self.model, to_device(mb, self.device), self.weight_version, self.temperature, self.objective,
            self.compute_dtype,
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """CPU copies of the weights for an engine's ``update_weights`` (tied weights appear once per name)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save_checkpoint(self, root: Path, cursor: dict[str, Any]) -> Path:
        """Atomic HF-loadable checkpoint plus optimizer/RNG state, version and data ``cursor``."""
        return save_checkpoint(
            Path(root), self.step, self.model, self.tokenizer, self.optimizer, self.weight_version, cursor,
            self.cfg.keep_checkpoints,
        )

    def restore(self, root: Path) -> dict[str, Any]:
        """Restore optimizer, RNG, step and version from the latest checkpoint under ``root``.

        The model must already hold that checkpoint's weights (load it with ``load_policy(path)``), except
        for a sharded checkpoint of the FSDP trainer, whose weights are loaded here too (at any world size);
        returns the saved data cursor.

        Raises:
            fireflash.training.checkpoint.CheckpointError: nothing to resume from.
        """
        path = latest_checkpoint(Path(root))
        if is_sharded(path):
            meta = load_sharded_state(path, self.model, self.optimizer)
        else:
            meta = load_checkpoint_state(path, self.optimizer)
        self.step, self.weight_version = meta["step"], meta["weight_version"]
        return meta["cursor"]
