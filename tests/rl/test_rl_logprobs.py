"""Chunked log-probs / entropy against a naive full-vocabulary log-softmax (issue 7 item 4)."""

import pytest
import torch

from fireflash.rl.logprobs import chunked_policy_logprobs

pytestmark = pytest.mark.unit


def _inputs(t=37, h=16, v=50, k=6, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(t, h, generator=g, dtype=dtype, requires_grad=True)
    weight = torch.randn(v, h, generator=g, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, v, (t,), generator=g)
    topk = torch.stack([torch.randperm(v, generator=g)[:k] for _ in range(t)])
    return hidden, weight, targets, topk


def _naive(hidden, weight, targets, topk, temperature):
    logp = torch.log_softmax(hidden @ weight.T / temperature, dim=-1)  # [T, V] held whole
    entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(1, targets[:, None]).squeeze(1), logp.gather(1, topk), entropy


@pytest.mark.parametrize("chunk_tokens", [1, 8, 37, 512])
def test_chunked_equals_naive_values_and_gradients(chunk_tokens):
    hidden, weight, targets, topk = _inputs()
    out = chunked_policy_logprobs(hidden, weight, targets, topk, temperature=0.7, chunk_tokens=chunk_tokens)
    ref = _naive(hidden, weight, targets, topk, 0.7)
    for got, want in zip(out, ref):
        torch.testing.assert_close(got, want.detach(), atol=1e-5, rtol=1e-5)
    # an arbitrary mix of both outputs exercises every gradient path
    mix_t, mix_k = (
        torch.linspace(-1, 2, targets.numel()),
        torch.linspace(0.5, -0.5, topk.numel()).view(topk.shape),
    )
    grads = torch.autograd.grad((out.target * mix_t).sum() + (out.topk * mix_k).sum(), (hidden, weight))
    want = torch.autograd.grad((ref[0] * mix_t).sum() + (ref[1] * mix_k).sum(), (hidden, weight))
    for got, w in zip(grads, want):
        torch.testing.assert_close(got, w, atol=1e-5, rtol=1e-5)


def test_gradcheck_in_double_precision():
    hidden, weight, targets, topk = _inputs(t=5, h=3, v=7, k=3, dtype=torch.float64)

    def f(h, w):
        out = chunked_policy_logprobs(h, w, targets, topk, temperature=1.3, chunk_tokens=2)
        return out.target, out.topk

    assert torch.autograd.gradcheck(f, (hidden, weight))


def test_without_topk_and_entropy_is_detached():
    hidden, weight, targets, _ = _inputs()
    out = chunked_policy_logprobs(hidden, weight, targets, None, chunk_tokens=4)
    assert out.topk.shape == (37, 0)
    assert not out.entropy.requires_grad and out.target.requires_grad


def test_uniform_logits_give_log_v_entropy_and_logprob():
    # zero weights → uniform softmax over V = 50: log p = -log 50, entropy = log 50 (hand values)
    hidden = torch.randn(4, 3)
    out = chunked_policy_logprobs(hidden, torch.zeros(50, 3), torch.tensor([0, 1, 2, 49]), chunk_tokens=3)
    torch.testing.assert_close(out.target, torch.full((4,), -3.912023005428146))
    torch.testing.assert_close(out.entropy, torch.full((4,), 3.912023005428146))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature 0.0 must be > 0"),
        ({"chunk_tokens": 0}, "chunk_tokens 0"),
        (
            {"target_ids": torch.tensor([0, 99])},
            r"target_ids range \[0, 99\] is outside the vocabulary \[0, 50\)",
        ),
        ({"target_ids": torch.tensor([0, 1, 2])}, "shapes: hidden"),
    ],
)
def test_bad_input_is_named(kwargs, message):
    args = {
        "hidden": torch.randn(2, 3),
        "lm_head_weight": torch.randn(50, 3),
        "target_ids": torch.tensor([0, 1]),
    }
    with pytest.raises(ValueError, match=message):
        chunked_policy_logprobs(**(args | kwargs))


def test_bf16_weights_give_fp32_logprobs_and_bf16_gradients():
    hidden, weight, targets, topk = _inputs()
    h16, w16 = (x.detach().bfloat16().requires_grad_() for x in (hidden, weight))
    out = chunked_policy_logprobs(h16, w16, targets, topk, chunk_tokens=8)
    assert out.target.dtype == out.topk.dtype == torch.float32
    ref = _naive(h16.detach().float(), w16.detach().float(), targets, topk, 1.0)
    torch.testing.assert_close(out.target, ref[0], atol=0.1, rtol=0.02)  # bf16 logits: ~3 significant digits
    out.target.sum().backward()
    assert h16.grad.dtype == w16.grad.dtype == torch.bfloat16
