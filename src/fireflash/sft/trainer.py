"""Supervised warm-up on oracle trajectories: cross-entropy on the assistant tokens only (issue #10).

    trainer = SFTTrainer(model, tokenizer, SFTConfig())
    metrics = trainer.step(examples)          # one AdamW update over a batch of examples

Shared prefixes (``SFTConfig.share_prefix``, on by default): the rows of a micro-batch share their
system prompt. It is run once without gradient and its keys/values are broadcast to every row, so the
backward pass covers only the task turn and what follows (~3× fewer tokens with SmolLM2's tool prompt).
What that drops is the gradient that would flow into the weights *through the system prompt's keys and
values*; the assistant tokens' own losses and every weight they touch directly are exact, and the
prefix is recomputed with the current weights at every micro-batch, so the forward pass is exact
(test: ``tests/sft/test_trainer.py``). ``share_prefix = false`` gives the full gradient.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from fireflash.sft.config import SFTConfig
from fireflash.sft.data import Example, SFTMicroBatch, make_micro_batch, plan_micro_batches
from fireflash.training.prefix import shared_prefix_hidden


def hidden_states(model: torch.nn.Module, mb: SFTMicroBatch) -> torch.Tensor:
    """Final hidden states [B, S, H] of the suffix rows, attending to the shared prefix (run without gradient)."""
    return shared_prefix_hidden(model, mb.prefix_ids, mb.suffix_ids, prefix_grad=False)


class SFTTrainer:
    """Full-parameter AdamW on token-mean cross-entropy over the assistant tokens of a batch.

    Args:
        model: causal LM with ``model.model`` (body) and ``lm_head`` (Llama / Qwen / SmolLM2 classes).
        tokenizer: its pad id pads micro-batches (eos or 0 when it has none).
        cfg: optimizer, schedule and micro-batch settings.
        total_steps: steps of the whole run, for the cosine schedule.
        start_step: steps already taken (on resume), so the schedule continues where it stopped.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, cfg: SFTConfig, total_steps: int, start_step: int = 0) -> None:
        self.model, self.tokenizer, self.cfg = model, tokenizer, cfg
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s + start_step, cfg.warmup_steps, total_steps))
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (getattr(tokenizer, "eos_token_id", None) or 0)
        self.step_count = start_step

    def step(self, examples: Sequence[Example]) -> dict[str, float]:
        """One optimizer update on ``examples``.

        Returns:
            ``loss`` (mean nats per assistant token), ``accuracy`` (greedy top-1 share on those tokens),
            ``tokens/loss`` and ``tokens/forward`` (counts), ``micro_batches``, ``grad_norm`` (before
            clipping), ``lr`` and ``step_sec`` (seconds).

        Raises:
            ValueError: an example does not fit ``cfg.micro_batch_tokens``, or no example has a loss token.
        """
        start = time.perf_counter()
        plan = plan_micro_batches(examples, self.cfg.micro_batch_tokens, self.cfg.share_prefix)
        batches = [make_micro_batch(rows, self.pad_id, self.cfg.share_prefix) for rows in plan]
        n_loss = sum(mb.n_loss_tokens for mb in batches)
        if not n_loss:
            raise ValueError("SFT batch has no assistant tokens to learn from (check the oracle trajectories)")
        self.model.train()
        total_loss, correct, forward_tokens = 0.0, 0, 0
        for mb in batches:
            hidden = hidden_states(self.model, mb)
            keep = mb.labels != -100
            logits = hidden[keep] @ self.model.lm_head.weight.T  # only predicted positions: [N, V]
            targets = mb.labels[keep]
            loss = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum") / n_loss
            loss.backward()
            total_loss += loss.item()
            correct += int((logits.argmax(-1) == targets).sum())
            forward_tokens += mb.suffix_ids.numel() + mb.prefix_ids.numel()
        self.model.eval()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip_norm)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step_count += 1
        return {
            "loss": total_loss, "accuracy": correct / n_loss, "tokens/loss": float(n_loss),
            "tokens/forward": float(forward_tokens), "micro_batches": float(len(batches)),
            "grad_norm": float(grad_norm), "lr": lr, "step_sec": time.perf_counter() - start,
        }


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to 1, then cosine decay to 0.1 at ``total_steps`` (a multiplier of ``SFTConfig.lr``)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
