"""PyTorch integration: ``psa_tvm::merge_attn`` as a differentiable ``torch.library`` custom op.

The op has fake (meta) implementations, so ``torch.compile(fullgraph=True)`` traces it with no
graph break and with dynamic shapes. On CUDA it launches on ``torch.cuda.current_stream()`` of
the tensors' device and allocates only through torch, so it can be captured in a CUDA graph.
On CPU it runs the LLVM build of the same TensorIR.
"""

from __future__ import annotations

import torch

from psa_tvm import ops

__all__ = ["merge_attn", "merge_attn_backward"]


@torch.library.custom_op("psa_tvm::merge_attn", mutates_args=())
def _merge_attn(lo: torch.Tensor, hi: torch.Tensor, num_heads: int, height: int,
                width: int) -> torch.Tensor:
    return ops.merge(lo, hi, num_heads, height, width)


@_merge_attn.register_fake
def _merge_attn_fake(lo, hi, num_heads, height, width):
    torch._check(lo.shape == hi.shape, lambda: "hi: expected the shape of lo")
    torch._check(lo.dim() == 3, lambda: "lo: expected [B*num_heads, H*W, key_dim]")
    torch._check(lo.shape[1] == height * width, lambda: "lo: expected dim 1 == H*W")
    batch = lo.shape[0] // num_heads
    return lo.new_empty((batch, 2 * num_heads * lo.shape[2], height, width))


@torch.library.custom_op("psa_tvm::merge_attn_backward", mutates_args=())
def _merge_attn_backward(grad: torch.Tensor, num_heads: int,
                         key_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return ops.merge_backward(grad, num_heads, key_dim)


@_merge_attn_backward.register_fake
def _merge_attn_backward_fake(grad, num_heads, key_dim):
    torch._check(grad.dim() == 4, lambda: "d_merged: expected [B, c, H, W]")
    shape = (grad.shape[0] * num_heads, grad.shape[2] * grad.shape[3], key_dim)
    return grad.new_empty(shape), grad.new_empty(shape)


def _setup_context(ctx, inputs, output) -> None:
    _, _, ctx.num_heads, _, _ = inputs
    ctx.key_dim = inputs[0].shape[2]


def _backward(ctx, grad):
    d_lo, d_hi = _merge_attn_backward(grad.contiguous(), ctx.num_heads, ctx.key_dim)
    return d_lo, d_hi, None, None, None


torch.library.register_autograd("psa_tvm::merge_attn", _backward, setup_context=_setup_context)


def merge_attn(lo: torch.Tensor, hi: torch.Tensor, num_heads: int, H: int,
               W: int) -> torch.Tensor:
    """Differentiable merge of ``lo``, ``hi`` (``[B*nh, H*W, kd]``) into ``[B, 2*nh*kd, H, W]``."""
    return torch.ops.psa_tvm.merge_attn(lo, hi, num_heads, H, W)


def merge_attn_backward(d_merged: torch.Tensor, num_heads: int,
                        key_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward kernel as an op: ``d_merged [B, c, H, W]`` -> ``(d_lo, d_hi)``."""
    return torch.ops.psa_tvm.merge_attn_backward(d_merged, num_heads, key_dim)
