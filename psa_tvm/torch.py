"""PyTorch integration: ``psa_tvm::merge_attn`` as a differentiable ``torch.library`` op.

The ops are declared with schemas and given CUDA and CPU kernels plus fake (meta)
implementations, so ``torch.compile(fullgraph=True)`` traces them with no graph break and with
dynamic shapes. On CUDA they launch on ``torch.cuda.current_stream()`` of the tensors' device
and allocate only through torch, so they can be captured in a CUDA graph. On CPU they run the
LLVM build of the same TensorIR. Eager calls of :func:`merge_attn` on plain tensors skip the
dispatcher and call the native library directly (docs/native.md).
"""

from __future__ import annotations

import torch

from psa_tvm import ops
from psa_tvm.runtime import torch_ext

__all__ = ["merge_attn", "merge_attn_backward"]

_LIB = torch.library.Library("psa_tvm", "DEF")
_LIB.define("merge_attn(Tensor lo, Tensor hi, int num_heads, SymInt H, SymInt W) -> Tensor")
_LIB.define("merge_attn_backward(Tensor d_merged, int num_heads, int key_dim) "
            "-> (Tensor, Tensor)")


def _merge_attn_impl(lo, hi, num_heads, height, width):
    return ops.merge(lo, hi, num_heads, height, width)


def _merge_attn_backward_impl(d_merged, num_heads, key_dim):
    return ops.merge_backward(d_merged, num_heads, key_dim)


# A plain kernel registration per backend: the dispatcher calls straight into ops.merge,
# without the extra Python layers of @custom_op (host overhead is part of the op's cost).
for _key in ("CUDA", "CPU"):
    _LIB.impl("merge_attn", _merge_attn_impl, _key)
    _LIB.impl("merge_attn_backward", _merge_attn_backward_impl, _key)


@torch.library.register_fake("psa_tvm::merge_attn")
def _merge_attn_fake(lo, hi, num_heads, height, width):
    torch._check(lo.dim() == 3, lambda: "lo: expected [B*num_heads, H*W, key_dim]")
    torch._check(lo.shape == hi.shape, lambda: "hi: expected the shape of lo")
    torch._check(lo.shape[1] == height * width, lambda: "lo: expected dim 1 == H*W")
    batch = lo.shape[0] // num_heads
    return lo.new_empty((batch, 2 * num_heads * lo.shape[2], height, width))


@torch.library.register_fake("psa_tvm::merge_attn_backward")
def _merge_attn_backward_fake(d_merged, num_heads, key_dim):
    torch._check(d_merged.dim() == 4, lambda: "d_merged: expected [B, c, H, W]")
    shape = (d_merged.shape[0] * num_heads, d_merged.shape[2] * d_merged.shape[3], key_dim)
    return d_merged.new_empty(shape), d_merged.new_empty(shape)


def _setup_context(ctx, inputs, output) -> None:
    ctx.num_heads = inputs[2]
    ctx.key_dim = inputs[0].shape[2]


def _backward(ctx, grad):
    d_lo, d_hi = torch.ops.psa_tvm.merge_attn_backward(grad.contiguous(), ctx.num_heads,
                                                       ctx.key_dim)
    return d_lo, d_hi, None, None, None


torch.library.register_autograd("psa_tvm::merge_attn", _backward, setup_context=_setup_context)


_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled


def merge_attn(lo: torch.Tensor, hi: torch.Tensor, num_heads: int, H: int,
               W: int) -> torch.Tensor:
    """Differentiable merge of ``lo``, ``hi`` (``[B*nh, H*W, kd]``) into ``[B, 2*nh*kd, H, W]``.

    Eager calls on plain tensors go straight to the native library (no dispatcher), through
    the PyTorch extension where it is built (allocation and autograd node in C++); anything
    the dispatcher must see (torch.compile and export tracing, tensor subclasses such as fake
    or functional tensors, dispatch and function modes) calls ``torch.ops.psa_tvm.merge_attn``.
    Both run the same kernel with the same checks.
    """
    if _is_compiling():  # first: traced, nothing below is looked at
        return torch.ops.psa_tvm.merge_attn(lo, hi, num_heads, H, W)
    lane = torch_ext.LANE
    if lane is not None and lane[0] is ops._NATIVE:
        # The extension, bound by an earlier call: its C++ checks that this is a plain eager
        # call (else None) and runs it, so this path costs one Python-level check.
        try:
            merged = lane[1].merge_attn_eager(lo, hi, num_heads, H, W)
        except RuntimeError as err:
            ops._ext_missed(err)
        else:
            if merged is not None:
                return merged
    if (type(lo) is _Tensor and type(hi) is _Tensor
            and not _dispatch_modes() and not _function_modes()):
        native = ops._NATIVE
        if native is None:
            native = ops._load_native()
        if native:
            ext = (torch_ext.module_for(native.path, may_build=lo.is_cuda)
                   if type(num_heads) is int and type(H) is int and type(W) is int else None)
            if ext is not None:  # allocation and autograd node in C++ (runtime/torch_ext.py)
                torch_ext.open_lane(native, ext)
                try:
                    return ext.merge_attn(lo, hi, num_heads, H, W)
                except RuntimeError as err:
                    ops._ext_missed(err)
            try:
                if _grad_enabled() and (lo.requires_grad or hi.requires_grad):
                    return _NativeMerge.apply(lo, hi, num_heads, H, W)
                return native.merge(lo, hi, num_heads, H, W, None)
            except ops._NATIVE_MISSES as err:
                ops._native_missed(err)
    return torch.ops.psa_tvm.merge_attn(lo, hi, num_heads, H, W)


class _NativeMerge(torch.autograd.Function):
    """Eager autograd on the native library: the op's autograd formula without the dispatcher
    (``merge_attn`` takes this path only when the library is loaded)."""

    @staticmethod
    def forward(ctx, lo, hi, num_heads, height, width):
        ctx.num_heads = num_heads
        return ops._NATIVE.merge(lo, hi, num_heads, height, width, None)

    @staticmethod
    def backward(ctx, grad):
        d_lo, d_hi = torch.ops.psa_tvm.merge_attn_backward(grad.contiguous(), ctx.num_heads,
                                                           grad.shape[1] // (2 * ctx.num_heads))
        return d_lo, d_hi, None, None, None


def merge_attn_backward(d_merged: torch.Tensor, num_heads: int,
                        key_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward kernel as an op: ``d_merged [B, c, H, W]`` -> ``(d_lo, d_hi)``."""
    return torch.ops.psa_tvm.merge_attn_backward(d_merged, num_heads, key_dim)


# PSA attention end to end (pack, flash/cuDNN SDPA, merge): psa_tvm/attention.py.
from psa_tvm.attention import (  # noqa: E402
    merge_heads,
    merge_heads2,
    psa_attention,
    split_heads,
)

__all__ += ["merge_heads", "merge_heads2", "psa_attention", "split_heads"]
