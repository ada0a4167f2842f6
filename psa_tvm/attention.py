"""PSA attention end to end: pack, SDPA (flash or cuDNN), merge, as differentiable torch ops.

``psa_attention(qkv, num_heads, key_dim, H, W)`` computes ultralytics' ``Attention`` core (its
``attn_ratio=0.5`` case, ``head_dim = 2*key_dim``) from the ``qkv`` conv output
``[B, nh*4*kd, H, W]`` and returns ``[B, nh*2*kd, H, W]``. The layout changes around the
attention run as compiled kernels of the layout family (:mod:`psa_tvm.layouts`):

- ``flash``: pack ``qkv`` into ``[B, N, nh, 4*kd]`` (one scatter kernel; ``q``, ``k``, ``V_lo``,
  ``V_hi`` are chunk views), two flash calls (flash needs one head size for q, k and v), the two
  outputs gathered into NCHW (one kernel). Backward: scatter ``d_out`` into contiguous ``d_lo``,
  ``d_hi``, two flash backward calls, one gather summing the two ``dq``/``dk`` into ``d_qkv``.
- ``cudnn``: the same pack, one cuDNN call on the full ``V`` (cuDNN takes ``dv = 2*dq``), one
  gather. Backward: scatter, one cuDNN backward call, one gather.
- ``sdpa``: the same pack and merge around ``F.scaled_dot_product_attention`` with torch
  choosing the backend and autograd doing the rest (any device and dtype; the CPU path).

Why ``[B, N, nh, d]``: measured on the H200 (docs/attention.md), flash and cuDNN take the chunk
views with no copy, return outputs and gradients in that memory layout, and the
``[B, nh, N, d]`` layout costs four extra copy kernels in the flash backward.

``channels_last`` input: a ``qkv`` in channels_last memory (a model run with
``.to(memory_format=torch.channels_last)``, or a 1x1 conv computed as a GEMM) *is* the packed
``[B, N, nh, 4*kd]`` tensor, so no pack runs: q, k and V are views of ``qkv`` itself. The result
is channels_last too (torch's convention: ops keep their input's memory format), and it is the
attention's own output memory: cuDNN's ``[B, N, nh, 2*kd]`` as a view, no kernel; flash's two
halves joined along ``d`` (one ``torch.cat``). The backward takes a gradient in either format
and returns ``d_qkv`` channels_last (sums and joins, no transposes).

The small ops (``psa_tvm::split_heads``, ``merge_heads``, ``merge_heads2``, ``split_heads2``,
``qkv_grad``) are ``torch.library`` ops with fake implementations; on CPU they are plain torch
permutes (bitwise the same result). ``torch.compile(fullgraph=True)`` traces all of it, dynamic
shapes included.
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from psa_tvm import ops
from psa_tvm.layouts import GATHER_OUTPUT, STREAM_OPS
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime import torch_ext

__all__ = ["BACKENDS", "merge_heads", "merge_heads2", "psa_attention", "resolve_backend",
           "split_heads"]

BACKENDS = ("auto", "flash", "cudnn", "sdpa")

_LIB = torch.library.Library("psa_tvm", "FRAGMENT")
_LIB.define("split_heads(Tensor x, int num_heads, int key_dim) -> Tensor")
_LIB.define("merge_heads(Tensor p, int key_dim, SymInt H, SymInt W) -> Tensor")
_LIB.define("merge_heads2(Tensor lo, Tensor hi, SymInt H, SymInt W) -> Tensor")
_LIB.define("split_heads2(Tensor x, int num_heads, int key_dim) -> Tensor")
_LIB.define("qkv_grad(Tensor[] grads, str backend, SymInt H, SymInt W) -> Tensor")

_SPLIT_OPS = {2: "attn", 4: "qkv"}  # streams per head -> family op
_GRAD_OPS = {"flash": ("qkv_grad_flash", ("dq1", "dq2", "dk1", "dk2", "dv_lo", "dv_hi")),
             "cudnn": ("qkv_grad_cudnn", ("dq", "dk", "dv"))}


# ----------------------------------------------------------------- checks
def _streams_of(x: torch.Tensor, num_heads: int, key_dim: int) -> int:
    for name, value in (("num_heads", num_heads), ("key_dim", key_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if x.dim() != 4 or x.shape[1] % (num_heads * key_dim) or \
            x.shape[1] // (num_heads * key_dim) not in _SPLIT_OPS:
        raise ValueError(f"x: expected [B, S*{num_heads}*{key_dim}, H, W] with S in "
                         f"{sorted(_SPLIT_OPS)}, got {list(x.shape)}")
    return x.shape[1] // (num_heads * key_dim)


def _check_heads(name: str, p: torch.Tensor, key_dim: int, height: int, width: int,
                 widths: tuple[int, ...] = (2, 4)) -> int:
    if p.dim() != 4 or p.shape[1] != height * width or p.shape[3] % key_dim or \
            p.shape[3] // key_dim not in widths:
        raise ValueError(f"{name}: expected [B, H*W={height * width}, num_heads, S*{key_dim}] "
                         f"with S in {list(widths)}, got {list(p.shape)}")
    return p.shape[3] // key_dim


# ----------------------------------------------------------------- CUDA launches
@lru_cache(maxsize=64)
def _runtime(op: str, key_dim: int, num_heads: int, dtype: str):
    from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp

    return PsaStreamRuntimeOp(op, key_dim, num_heads, dtype)


_PASSES = ("forward", "backward")
# (library, op, key_dim, num_heads, dtype) the native library has no build for: the Python
# launcher runs those without asking the library again.
_NATIVE_LACKS: set[tuple] = set()


def _launch(op: str, pass_: int, tensors: tuple[torch.Tensor, ...], batch: int, n: int,
            num_heads: int, key_dim: int) -> None:
    """Run one layout kernel; ``tensors`` in ``STREAM_OPS[op].tensor_names`` order (inputs,
    then the output). Through the artifact directory's native library when it has the build
    (one C++ call: checks, choice, launch on torch's current stream), else the Python launcher
    (which may build on demand)."""
    native = ops._NATIVE if ops._NATIVE is not None else ops._load_native()
    if native and native.stream_run is not None:
        index = native.stream_ops.get(op)
        key = (native.path, op, key_dim, num_heads, tensors[0].dtype)
        if index is not None and key not in _NATIVE_LACKS:
            try:
                native.stream_run(index, pass_, batch, n, num_heads, key_dim, *tensors)
                return
            except native_rt.NativeArtifactNotFound:
                _NATIVE_LACKS.add(key)
    name = _PASSES[pass_]
    _runtime(op, key_dim, num_heads, _dtype(tensors[0])).launch(
        name, dict(zip(STREAM_OPS[op].tensor_names(name), tensors, strict=True)), batch, n,
        _stream(tensors[0]))


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _stream(t: torch.Tensor) -> int:
    return torch._C._cuda_getCurrentRawStream(t.device.index)


def _contig(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _channels_last(x: torch.Tensor) -> bool:
    """``x`` ``[B, C, H, W]`` in channels_last memory, i.e. its memory is ``[B, N, C]``. A tensor
    that is plain contiguous too (``H*W == 1``...) takes the NCHW path: the same memory."""
    return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def _nhwc_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """A channels_last ``[B, C, H, W]`` as its memory, ``[B, N, nh, C/nh]`` (a view)."""
    b, c, height, width = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, height * width, num_heads, c // num_heads)


def _channels_last_of(p: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``[B, N, nh, d]`` -> ``[B, nh*d, H, W]`` in channels_last memory, a view of ``p``'s own
    memory (copied first only if ``p`` is not contiguous)."""
    b, _, nh, d = p.shape
    return _contig(p).view(b, height, width, nh * d).permute(0, 3, 1, 2)


# ----------------------------------------------------------------- split_heads / merge_heads
def _split_heads_cpu(x, num_heads, key_dim):
    streams = _streams_of(x, num_heads, key_dim)
    b, _, h, w = x.shape
    return (x.reshape(b, num_heads, streams, key_dim, h * w).permute(0, 4, 1, 2, 3)
            .contiguous().view(b, h * w, num_heads, streams * key_dim))


def _split_heads_cuda(x, num_heads, key_dim):
    streams = _streams_of(x, num_heads, key_dim)
    b, _, h, w = x.shape
    out = x.new_empty((b, h * w, num_heads, streams * key_dim))
    _launch(_SPLIT_OPS[streams], 1, (x, out), b, h * w, num_heads, key_dim)
    return out


def _merge_heads_cpu(p, key_dim, height, width):
    streams = _check_heads("p", p, key_dim, height, width)
    b, n, nh, _ = p.shape
    return (p.reshape(b, n, nh, streams, key_dim).permute(0, 2, 3, 4, 1).contiguous()
            .view(b, nh * streams * key_dim, height, width))


def _merge_heads_cuda(p, key_dim, height, width):
    streams = _check_heads("p", p, key_dim, height, width)
    b, n, nh, _ = p.shape
    out = p.new_empty((b, nh * streams * key_dim, height, width))
    _launch(_SPLIT_OPS[streams], 0, (p, out), b, n, nh, key_dim)
    return out


def _merge_heads2_cpu(lo, hi, height, width):
    _check_pair(lo, hi, height, width)
    return _merge_heads_cpu(torch.cat([lo, hi], 3), lo.shape[3], height, width)


def _merge_heads2_cuda(lo, hi, height, width):
    _check_pair(lo, hi, height, width)
    b, n, nh, kd = lo.shape
    out = lo.new_empty((b, 2 * nh * kd, height, width))
    _launch("attn_flash", 0, (lo, hi, out), b, n, nh, kd)
    return out


def _split_heads2_cpu(x, num_heads, key_dim):
    _check_split2(x, num_heads, key_dim)
    b, _, h, w = x.shape
    return x.reshape(b, num_heads, 2, key_dim, h * w).permute(2, 0, 4, 1, 3).contiguous()


def _split_heads2_cuda(x, num_heads, key_dim):
    _check_split2(x, num_heads, key_dim)
    b, _, h, w = x.shape
    out = x.new_empty((2, b, h * w, num_heads, key_dim))
    _launch("attn_flash", 1, (x, out), b, h * w, num_heads, key_dim)
    return out


def _check_split2(x, num_heads, key_dim):
    if _streams_of(x, num_heads, key_dim) != 2:
        raise ValueError(f"x: expected [B, 2*{num_heads}*{key_dim}, H, W], got {list(x.shape)}")


def _check_pair(lo, hi, height, width):
    if lo.dim() != 4 or lo.shape[1] != height * width:
        raise ValueError(f"lo: expected [B, H*W={height * width}, num_heads, key_dim], "
                         f"got {list(lo.shape)}")
    if hi.shape != lo.shape or hi.dtype != lo.dtype or hi.device != lo.device:
        raise ValueError(f"hi: expected the shape, dtype and device of lo "
                         f"({list(lo.shape)}, {lo.dtype}, {lo.device}), got "
                         f"({list(hi.shape)}, {hi.dtype}, {hi.device})")


def _qkv_grad_check(grads, backend, height, width):
    if backend not in _GRAD_OPS:
        raise ValueError(f"backend: expected one of {sorted(_GRAD_OPS)}, got {backend!r}")
    names = _GRAD_OPS[backend][1]
    if len(grads) != len(names):
        raise ValueError(f"grads: expected {list(names)}, got {len(grads)} tensors")
    first = grads[0]
    if first.dim() != 4 or first.shape[1] != height * width:
        raise ValueError(f"{names[0]}: expected [B, H*W={height * width}, num_heads, key_dim], "
                         f"got {list(first.shape)}")
    return names


def _qkv_grad_cpu(grads, backend, height, width):
    _qkv_grad_check(grads, backend, height, width)
    kd = grads[0].shape[3]
    if backend == "flash":
        dq1, dq2, dk1, dk2, dv_lo, dv_hi = grads
        packed = torch.cat([dq1 + dq2, dk1 + dk2, dv_lo, dv_hi], 3)
    else:
        packed = torch.cat(list(grads), 3)
    return _merge_heads_cpu(packed, kd, height, width)


def _qkv_grad_cuda(grads, backend, height, width):
    names = _qkv_grad_check(grads, backend, height, width)
    b, n, nh, kd = grads[0].shape
    out = grads[0].new_empty((b, 4 * nh * kd, height, width))
    tensors = dict(zip(names, grads, strict=True))
    tensors[GATHER_OUTPUT] = out
    op = _GRAD_OPS[backend][0]
    _launch(op, 0, tuple(tensors[t] for t in STREAM_OPS[op].tensor_names("forward")), b, n, nh,
            kd)
    return out


_NAMES = ("split_heads", "merge_heads", "merge_heads2", "split_heads2", "qkv_grad")
_IMPLS = {"CPU": (_split_heads_cpu, _merge_heads_cpu, _merge_heads2_cpu, _split_heads2_cpu,
                  _qkv_grad_cpu),
          "CUDA": (_split_heads_cuda, _merge_heads_cuda, _merge_heads2_cuda, _split_heads2_cuda,
                   _qkv_grad_cuda)}
for _key, _impls in _IMPLS.items():
    for _name, _impl in zip(_NAMES, _impls, strict=True):
        _LIB.impl(_name, _impl, _key)
_CUDA_IMPLS = dict(zip(_NAMES, _IMPLS["CUDA"], strict=True))


def _op(name: str, like: torch.Tensor):
    """The op to call inside the attention Functions: in eager on CUDA the kernel's Python
    implementation itself (the dispatcher's ~6 us per call skipped: autograd is handled by the
    Function around it), else the registered op (torch.compile traces it by its fake)."""
    if like.is_cuda and not torch.compiler.is_compiling():
        return _CUDA_IMPLS[name]
    return getattr(torch.ops.psa_tvm, name)


@torch.library.register_fake("psa_tvm::split_heads")
def _split_heads_fake(x, num_heads, key_dim):
    torch._check(x.dim() == 4, lambda: "x: expected [B, S*num_heads*key_dim, H, W]")
    streams = x.shape[1] // (num_heads * key_dim)
    return x.new_empty((x.shape[0], x.shape[2] * x.shape[3], num_heads, streams * key_dim))


@torch.library.register_fake("psa_tvm::merge_heads")
def _merge_heads_fake(p, key_dim, height, width):
    torch._check(p.dim() == 4, lambda: "p: expected [B, H*W, num_heads, S*key_dim]")
    return p.new_empty((p.shape[0], p.shape[2] * p.shape[3], height, width))


@torch.library.register_fake("psa_tvm::merge_heads2")
def _merge_heads2_fake(lo, hi, height, width):
    torch._check(lo.dim() == 4, lambda: "lo: expected [B, H*W, num_heads, key_dim]")
    return lo.new_empty((lo.shape[0], 2 * lo.shape[2] * lo.shape[3], height, width))


@torch.library.register_fake("psa_tvm::split_heads2")
def _split_heads2_fake(x, num_heads, key_dim):
    torch._check(x.dim() == 4, lambda: "x: expected [B, 2*num_heads*key_dim, H, W]")
    return x.new_empty((2, x.shape[0], x.shape[2] * x.shape[3], num_heads, key_dim))


@torch.library.register_fake("psa_tvm::qkv_grad")
def _qkv_grad_fake(grads, backend, height, width):
    g = grads[0]
    return g.new_empty((g.shape[0], 4 * g.shape[2] * g.shape[3], height, width))


def _split_heads_setup(ctx, inputs, output):
    x, _, ctx.key_dim = inputs
    ctx.hw = (x.shape[2], x.shape[3])


def _split_heads_backward(ctx, grad):
    return merge_heads(_contig(grad), ctx.key_dim, *ctx.hw), None, None


def _merge_heads_setup(ctx, inputs, output):
    p, ctx.key_dim, _, _ = inputs
    ctx.num_heads = p.shape[2]


def _merge_heads_backward(ctx, grad):
    return split_heads(_contig(grad), ctx.num_heads, ctx.key_dim), None, None, None


def _merge_heads2_setup(ctx, inputs, output):
    lo = inputs[0]
    ctx.num_heads, ctx.key_dim = lo.shape[2], lo.shape[3]


def _merge_heads2_backward(ctx, grad):
    d = torch.ops.psa_tvm.split_heads2(_contig(grad), ctx.num_heads, ctx.key_dim)
    return d[0], d[1], None, None


def _split_heads2_setup(ctx, inputs, output):
    x, _, _ = inputs
    ctx.hw = (x.shape[2], x.shape[3])


def _split_heads2_backward(ctx, grad):
    return merge_heads2(_contig(grad[0]), _contig(grad[1]), *ctx.hw), None, None


torch.library.register_autograd("psa_tvm::split_heads", _split_heads_backward,
                                setup_context=_split_heads_setup)
torch.library.register_autograd("psa_tvm::merge_heads", _merge_heads_backward,
                                setup_context=_merge_heads_setup)
torch.library.register_autograd("psa_tvm::merge_heads2", _merge_heads2_backward,
                                setup_context=_merge_heads2_setup)
torch.library.register_autograd("psa_tvm::split_heads2", _split_heads2_backward,
                                setup_context=_split_heads2_setup)


def split_heads(x: torch.Tensor, num_heads: int, key_dim: int) -> torch.Tensor:
    """``[B, S*nh*kd, H, W]`` -> ``[B, H*W, nh, S*kd]`` (``S`` = 2 or 4); differentiable.

    With ``S = 4`` this is the pack of ``qkv``: per head the chunks are ``q``, ``k``, ``V_lo``,
    ``V_hi``."""
    return torch.ops.psa_tvm.split_heads(x, num_heads, key_dim)


def merge_heads(p: torch.Tensor, key_dim: int, H: int, W: int) -> torch.Tensor:
    """``[B, H*W, nh, S*kd]`` -> ``[B, S*nh*kd, H, W]``, the inverse of :func:`split_heads`."""
    return torch.ops.psa_tvm.merge_heads(p, key_dim, H, W)


def merge_heads2(lo: torch.Tensor, hi: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """Two ``[B, H*W, nh, kd]`` attention outputs -> ``[B, 2*nh*kd, H, W]``; differentiable."""
    return torch.ops.psa_tvm.merge_heads2(lo, hi, H, W)


# ----------------------------------------------------------------- attention
# The fused SDPA entry points, called directly so that their saved outputs feed their backward
# (what torch's own autograd does), in one place (tests swap in a CPU emulation).
# The overloads themselves: calling the packets costs an overload resolution per call.
_ATEN = SimpleNamespace(
    flash=torch.ops.aten._scaled_dot_product_flash_attention.default,
    flash_backward=torch.ops.aten._scaled_dot_product_flash_attention_backward.default,
    cudnn=torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    cudnn_backward=torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default,
)


# (first chunk, chunks) of q, k, V_lo, V_hi and the full V in a head's 4*kd packed channels
_CHUNKS = {"q": (0, 1), "k": (1, 1), "v_lo": (2, 1), "v_hi": (3, 1), "v": (2, 2)}
_FLASH_VIEWS = ("q", "k", "v_lo", "v_hi")
_CUDNN_VIEWS = ("q", "k", "v")


def _views(p: torch.Tensor, key_dim: int, names: tuple[str, ...]) -> list[torch.Tensor]:
    """The named chunks of ``p [B, N, nh, 4*kd]`` as ``[B, nh, N, d]`` views (no copy). In
    eager one ``as_strided`` each (a slice and a transpose cost twice the host time); traced or
    differentiated, the slices (simplest for symbolic shapes, and the lighter backward)."""
    if torch.compiler.is_compiling() or (p.requires_grad and torch.is_grad_enabled()):
        return [p[..., first * key_dim:(first + count) * key_dim].transpose(1, 2)
                for first, count in (_CHUNKS[name] for name in names)]
    batch, n, heads, _ = p.shape
    s_b, s_n, s_h, _ = p.stride()
    offset = p.storage_offset()
    return [p.as_strided((batch, heads, n, count * key_dim), (s_b, s_h, s_n, 1),
                         offset + first * key_dim)
            for first, count in (_CHUNKS[name] for name in names)]


def _nhd(t: torch.Tensor) -> torch.Tensor:
    """``[B, nh, N, d]`` (with ``[B, N, nh, d]`` memory) -> the contiguous ``[B, N, nh, d]``."""
    return _contig(t.transpose(1, 2))


def _pack(qkv: torch.Tensor, num_heads: int, key_dim: int) -> torch.Tensor:
    """``qkv`` as the packed ``[B, N, nh, 4*kd]`` tensor: a view of a channels_last ``qkv``,
    else the pack kernel's output."""
    if _channels_last(qkv):
        return _nhwc_heads(qkv, num_heads)
    return _op("split_heads", qkv)(_contig(qkv), num_heads, key_dim)


def _join_halves(lo: torch.Tensor, hi: torch.Tensor, like: torch.Tensor, height: int,
                 width: int) -> torch.Tensor:
    """The two ``[B, N, nh, kd]`` flash outputs as the ``[B, 2*nh*kd, H, W]`` result, in the
    memory format of ``like`` (the ``qkv`` input)."""
    if _channels_last(like):
        return _channels_last_of(torch.cat([lo, hi], 3), height, width)
    return _op("merge_heads2", like)(lo, hi, height, width)


def _flash_forward(qkv, num_heads, key_dim, height, width):
    """pack -> two flash calls -> merge; returns the output and what the backward needs."""
    scale = key_dim ** -0.5
    p = _pack(qkv, num_heads, key_dim)
    q, k, v_lo, v_hi = _views(p, key_dim, _FLASH_VIEWS)
    flash = _ATEN.flash
    lo = flash(q, k, v_lo, 0.0, False, False, scale=scale)
    hi = flash(q, k, v_hi, 0.0, False, False, scale=scale)
    return _join_halves(_nhd(lo[0]), _nhd(hi[0]), qkv, height, width), p, lo, hi


def _flash_inference(qkv, num_heads, key_dim, height, width):
    """:func:`_flash_forward`'s output, and at batch 1 with one flash call: q and k expanded
    to a batch of 2 (stride 0) against V_lo and V_hi as one ``[2, nh, N, kd]`` view of the
    packed tensor (batch stride ``kd``). Batch-1 inference is host-bound, and one SDPA call
    instead of two saves one call's host time; the GPU runs both halves in one launch."""
    if qkv.shape[0] != 1:
        return _flash_forward(qkv, num_heads, key_dim, height, width)[0]
    p = _pack(qkv, num_heads, key_dim)
    q, k = _views(p, key_dim, ("q", "k"))
    _, n, heads, _ = p.shape
    _, s_n, s_h, _ = p.stride()
    v_pair = p.as_strided((2, heads, n, key_dim), (key_dim, s_h, s_n, 1),
                          p.storage_offset() + 2 * key_dim)
    o = _ATEN.flash(q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v_pair, 0.0, False,
                    False, scale=key_dim ** -0.5)[0]
    o = _nhd(o)  # [2, N, nh, kd]: o[0] the V_lo half, o[1] the V_hi half
    return _join_halves(o[:1], o[1:], qkv, height, width)


def _cudnn_forward(qkv, num_heads, key_dim, height, width, log_sumexp=True):
    """pack -> one cuDNN call on the full V -> back to NCHW (``log_sumexp`` for a backward)."""
    scale = key_dim ** -0.5
    p = _pack(qkv, num_heads, key_dim)
    q, k, v = _views(p, key_dim, _CUDNN_VIEWS)
    res = _ATEN.cudnn(q, k, v, None, log_sumexp, 0.0, False, False, scale=scale)
    if _channels_last(qkv):  # cuDNN's output memory is the channels_last result
        return _channels_last_of(_nhd(res[0]), height, width), p, res
    return _op("merge_heads", qkv)(_nhd(res[0]), key_dim, height, width), p, res


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv, num_heads, key_dim, height, width):
        scale = key_dim ** -0.5
        out, p, lo, hi = _flash_forward(qkv, num_heads, key_dim, height, width)
        ctx.save_for_backward(p, lo[0], lo[1], lo[2], lo[3], lo[6], lo[7],
                              hi[0], hi[1], hi[2], hi[3], hi[6], hi[7])
        ctx.meta = (num_heads, key_dim, height, width, scale, lo[4], lo[5],
                    _channels_last(qkv))
        return out

    @staticmethod
    def backward(ctx, grad):
        num_heads, key_dim, height, width, scale, max_q, max_k, channels_last = ctx.meta
        p, *saved = ctx.saved_tensors
        q, k, v_lo, v_hi = _views(p, key_dim, _FLASH_VIEWS)
        # d_lo, d_hi each contiguous: flash's backward copies a grad_out that is a chunk view
        if _channels_last(grad):
            g = _nhwc_heads(grad, num_heads)
            d_lo, d_hi = g[..., :key_dim].contiguous(), g[..., key_dim:].contiguous()
        else:
            d_lo, d_hi = _op("split_heads2", grad)(_contig(grad), num_heads, key_dim)
        do_lo, do_hi = d_lo.transpose(1, 2), d_hi.transpose(1, 2)
        bwd = _ATEN.flash_backward
        grads = []
        for d_o, v, (o, lse, cq, ck, seed, offset) in ((do_lo, v_lo, saved[:6]),
                                                       (do_hi, v_hi, saved[6:])):
            grads.append(bwd(d_o, q, k, v, o, lse, cq, ck, max_q, max_k, 0.0, False, seed,
                             offset, scale=scale))
        (dq1, dk1, dv_lo), (dq2, dk2, dv_hi) = grads
        if channels_last:  # d_qkv in the input's format: sums and one join, no transpose
            packed = torch.cat([_nhd(dq1) + _nhd(dq2), _nhd(dk1) + _nhd(dk2), _nhd(dv_lo),
                                _nhd(dv_hi)], 3)
            return _channels_last_of(packed, height, width), None, None, None, None
        d_qkv = _op("qkv_grad", grad)(
            [_nhd(dq1), _nhd(dq2), _nhd(dk1), _nhd(dk2), _nhd(dv_lo), _nhd(dv_hi)], "flash",
            height, width)
        return d_qkv, None, None, None, None


class _CudnnAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv, num_heads, key_dim, height, width):
        scale = key_dim ** -0.5
        out, p, res = _cudnn_forward(qkv, num_heads, key_dim, height, width)
        ctx.save_for_backward(p, res[0], res[1], res[2], res[3], res[6], res[7])
        ctx.meta = (num_heads, key_dim, height, width, scale, res[4], res[5],
                    _channels_last(qkv))
        return out

    @staticmethod
    def backward(ctx, grad):
        num_heads, key_dim, height, width, scale, max_q, max_k, channels_last = ctx.meta
        p, o, lse, cq, ck, seed, offset = ctx.saved_tensors
        q, k, v = _views(p, key_dim, _CUDNN_VIEWS)
        d_out = _pack(grad, num_heads, key_dim)  # a channels_last gradient is used as it is
        dq, dk, dv = _ATEN.cudnn_backward(
            d_out.transpose(1, 2), q, k, v, o, lse, seed, offset, None, cq, ck, max_q, max_k,
            0.0, False, scale=scale)
        if channels_last:
            packed = torch.cat([_nhd(dq), _nhd(dk), _nhd(dv)], 3)
            return _channels_last_of(packed, height, width), None, None, None, None
        d_qkv = _op("qkv_grad", grad)([_nhd(dq), _nhd(dk), _nhd(dv)], "cudnn", height, width)
        return d_qkv, None, None, None, None


def _sdpa_attention(qkv, num_heads, key_dim, height, width):
    channels_last = _channels_last(qkv)
    p = (_nhwc_heads(qkv, num_heads) if channels_last
         else split_heads(_contig(qkv), num_heads, key_dim))
    q, k, v = _views(p, key_dim, _CUDNN_VIEWS)
    o = F.scaled_dot_product_attention(q, k, v, scale=key_dim ** -0.5)
    if channels_last:
        return _channels_last_of(_nhd(o), height, width)
    return merge_heads(_nhd(o), key_dim, height, width)


_CAPABILITY: dict[int, int] = {}  # device index -> compute capability major, from eager calls


def _capability_major(device: torch.device) -> int:
    """The device's compute capability major. Under torch.compile, where the device query would
    break the graph, the value an eager call saw, else 8 (flash/cuDNN SDPA need sm_80+)."""
    index = device.index if device.index is not None else -1
    if torch.compiler.is_compiling():
        return _CAPABILITY.get(index, 8)
    major = _CAPABILITY.get(index)
    if major is None:
        major = _CAPABILITY[index] = torch.cuda.get_device_capability(device)[0]
    return major


# (device, dtype, key_dim) -> which backends can run it (resolve_backend runs on every call)
_SUPPORT: dict[tuple, dict[str, bool]] = {}


def _enabled(backend: str) -> bool:
    """torch's switch for its own SDPA backend (``torch.backends.cuda.enable_*_sdp``), which
    ``auto`` respects; under torch.compile (where reading it breaks the graph) taken as on."""
    if backend == "sdpa" or torch.compiler.is_compiling():
        return True
    return (torch.backends.cuda.cudnn_sdp_enabled() if backend == "cudnn"
            else torch.backends.cuda.flash_sdp_enabled())


def resolve_backend(backend: str, device: torch.device, dtype: torch.dtype,
                    key_dim: int) -> str:
    """The backend that runs: ``auto`` picks the fastest the device and dtype support
    (cuDNN, then flash, then ``sdpa``); a named backend that cannot run raises ``ValueError``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {list(BACKENDS)}, got {backend!r}")
    key = (device, dtype, key_dim)
    support = _SUPPORT.get(key)
    if support is None:
        fused_ok = (device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)
                    and key_dim % 8 == 0)
        major = _capability_major(device) if fused_ok else 0
        support = {"cudnn": fused_ok and major >= 8 and 2 * key_dim <= 128,
                   "flash": fused_ok and major >= 8 and key_dim <= 256, "sdpa": True}
        if not torch.compiler.is_compiling():  # traced, the capability may be a default
            _SUPPORT[key] = support
    if backend == "auto":
        return next(b for b in ("cudnn", "flash", "sdpa") if support[b] and _enabled(b))
    if not support[backend]:
        raise ValueError(f"backend: {backend!r} cannot run {dtype} key_dim={key_dim} on "
                         f"{device}; use 'auto' or 'sdpa'")
    return backend


def _extension_inference(backend: str, qkv: torch.Tensor, num_heads: int, key_dim: int,
                         height: int, width: int) -> torch.Tensor | None:
    """The flash/cuDNN inference forward in one C++ call (pack, SDPA, merge: the same kernels
    and calls as :func:`_flash_forward` / :func:`_cudnn_forward`) where the PyTorch extension
    is built (runtime/torch_ext.py) and the library has the builds; else None. psa_attention
    has checked the arguments: batch-1 inference is host-bound and pays every check."""
    native = ops._NATIVE if ops._NATIVE is not None else ops._load_native()
    if not native or native.stream_run is None:
        return None
    ext = torch_ext.module_for(native.path, may_build=True)
    if ext is None:
        return None
    try:
        packed = qkv if _channels_last(qkv) else _contig(qkv)  # channels_last: no pack
        return ext.attention_inference(packed, num_heads, key_dim, height, width,
                                       backend == "flash")
    except RuntimeError as err:
        if not str(err).startswith("PsaArtifactNotFound"):
            raise
    return None


def psa_attention(qkv: torch.Tensor, num_heads: int, key_dim: int, H: int, W: int,
                  backend: str = "auto") -> torch.Tensor:
    """ultralytics' ``Attention`` core: ``qkv [B, nh*4*kd, H, W]`` -> ``[B, nh*2*kd, H, W]``.

    Per head ``h`` the channels of ``qkv`` are ``q = [h*4kd, h*4kd+kd)``, ``k`` the next
    ``kd``, ``v`` the next ``2*kd``; the result is ``(v @ softmax(q^T k * kd**-0.5)^T)`` viewed
    as NCHW. ``backend``: ``auto`` | ``flash`` | ``cudnn`` | ``sdpa`` (see the module doc).
    Differentiable in ``qkv``. A channels_last ``qkv`` needs no pack and gives a channels_last
    result; any other layout is packed from its contiguous copy.
    """
    if not isinstance(qkv, torch.Tensor) or qkv.dim() != 4:
        raise ValueError(f"qkv: expected a [B, C, H, W] tensor, got "
                         f"{getattr(qkv, 'shape', type(qkv).__name__)}")
    for name, value in (("num_heads", num_heads), ("key_dim", key_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if qkv.shape[1] != 4 * num_heads * key_dim:
        raise ValueError(f"qkv: expected {4 * num_heads * key_dim} channels "
                         f"(num_heads={num_heads} x 4 x key_dim={key_dim}), got {qkv.shape[1]}")
    if (qkv.shape[2], qkv.shape[3]) != (H, W):
        raise ValueError(f"qkv: expected spatial size H={H}, W={W}, got "
                         f"{tuple(qkv.shape[2:])}")
    chosen = resolve_backend(backend, qkv.device, qkv.dtype, key_dim)
    if chosen == "sdpa":
        return _sdpa_attention(qkv, num_heads, key_dim, H, W)
    if not (torch.is_grad_enabled() and qkv.requires_grad) and not torch.compiler.is_compiling():
        # Nothing to differentiate (inference): the forward alone, without the Function's
        # bookkeeping (~6 us of host time at batch 1, where YOLO inference is host-bound).
        if qkv.is_cuda and type(qkv) is torch.Tensor:
            out = _extension_inference(chosen, qkv, num_heads, key_dim, H, W)
            if out is not None:
                return out
        if chosen == "flash":
            return _flash_inference(qkv, num_heads, key_dim, H, W)
        return _cudnn_forward(qkv, num_heads, key_dim, H, W, log_sumexp=False)[0]
    if chosen == "flash":
        return _FlashAttention.apply(qkv, num_heads, key_dim, H, W)
    return _CudnnAttention.apply(qkv, num_heads, key_dim, H, W)


def reference_attention(qkv: torch.Tensor, num_heads: int, key_dim: int, H: int,
                        W: int) -> torch.Tensor:
    """The plain-torch definition (ultralytics' matmul + softmax), for tests and benchmarks."""
    b = qkv.shape[0]
    q, k, v = qkv.view(b, num_heads, 4 * key_dim, H * W).split([key_dim, key_dim, 2 * key_dim],
                                                               dim=2)
    attn = ((q * key_dim ** -0.5).transpose(-2, -1) @ k).softmax(dim=-1)
    return (v @ attn.transpose(-2, -1)).view(b, num_heads * 2 * key_dim, H, W)

