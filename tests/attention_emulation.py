"""A CPU emulation of the fused SDPA entry points ``psa_tvm.attention`` calls (flash, cuDNN),
with their signatures, output layouts (``[B, N, nh, d]`` memory) and saved tensors, so the
autograd plumbing around them is tested without a GPU."""

from __future__ import annotations

import torch


def _math(q, k, v, scale):
    scores = (q.double() @ k.double().transpose(-2, -1)) * scale
    lse = torch.logsumexp(scores, -1)
    return (scores.softmax(-1) @ v.double()).to(q.dtype), lse.float()


def _bnhd_like(t: torch.Tensor) -> torch.Tensor:
    """An empty ``[B, nh, N, d]`` tensor with ``[B, N, nh, d]`` memory, as flash allocates."""
    b, h, n, d = t.shape
    return t.new_empty((b, n, h, d)).transpose(1, 2)


def _grads(grad_out, q, k, v, scale):
    with torch.enable_grad():
        leaves = [x.detach().double().requires_grad_(True) for x in (q, k, v)]
        scores = (leaves[0] @ leaves[1].transpose(-2, -1)) * scale
        out = scores.softmax(-1) @ leaves[2]
        grads = torch.autograd.grad(out, leaves, grad_out.double())
    result = []
    for g, like in zip(grads, (q, k, v), strict=True):
        r = _bnhd_like(like)
        r.copy_(g)
        result.append(r)
    return tuple(result)


def flash(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    assert q.shape[-1] == v.shape[-1], "flash needs one head size for q, k and v"
    o, lse = _math(q, k, v, scale)
    out = _bnhd_like(v)
    out.copy_(o)
    n = q.shape[2]
    return (out, lse, None, None, n, n, torch.empty(2, dtype=torch.int64), torch.empty(()),
            torch.empty(0))


def flash_backward(grad_out, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, dropout_p,
                   is_causal, seed, offset, *, scale=None):
    assert grad_out.stride(-1) == 1 and out.shape == grad_out.shape
    return _grads(grad_out, q, k, v, scale)


def cudnn(q, k, v, attn_bias, compute_lse, dropout_p=0.0, is_causal=False,
          return_debug_mask=False, *, scale=None):
    assert attn_bias is None
    o, lse = _math(q, k, v, scale)
    out = _bnhd_like(v)
    out.copy_(o)
    n = q.shape[2]
    return (out, lse.unsqueeze(-1), None, None, n, n, torch.empty(()), torch.empty(()), None)


def cudnn_backward(grad_out, q, k, v, out, lse, seed, offset, attn_bias, cum_q, cum_k, max_q,
                   max_k, dropout_p, is_causal, *, scale=None):
    assert attn_bias is None and grad_out.shape == out.shape
    return _grads(grad_out, q, k, v, scale)
