"""``merge`` and ``merge_backward``: the op as plain functions, dispatching on the device.

CPU tensors (torch or numpy) run the LLVM build of the TensorIR, CUDA tensors the prebuilt
kernels; neither needs TVM at run time, only the artifacts that ``psa-tvm build`` writes. When
the artifact directory has a native library (``psa_tvm_native-*.so``, docs/native.md) calls go
straight to it: validation, kernel choice and launch in C++ through TVM-FFI. Calls it cannot
take (a configuration it lacks, arguments tvm-ffi cannot convert) run the Python path below.
Outputs may be passed in (``out=``, ``d_lo=``/``d_hi=``); otherwise they are allocated like the
input.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any

from psa_tvm.config import OpConfig
from psa_tvm.runtime import env, torch_ext
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime.cpu import cpu_kernels
from psa_tvm.runtime.memo import Memo
from psa_tvm.runtime.tensors import CPU, CUDA, TensorInfo, tensor_info
from psa_tvm.runtime.validation import (
    MergeDims,
    check_backward_input,
    check_count,
    check_forward_inputs,
    check_no_overlap,
    check_output,
)


def merge(lo: Any, hi: Any, num_heads: int, H: int, W: int, *, out: Any = None) -> Any:
    """Merge the two attention outputs ``[B*nh, H*W, kd]`` into ``[B, 2*nh*kd, H, W]``.

    ``merged[b, h*2kd + d, n] = lo[b*nh + h, n, d]`` and ``merged[b, h*2kd + kd + d, n] =
    hi[b*nh + h, n, d]``. Returns ``out`` (allocated when not given).
    """
    lane = torch_ext.LANE
    if lane is not None and lane[0] is _NATIVE and not lane[2]():
        try:  # the extension's eager lane (runtime/torch_ext.py): None if not a plain call
            merged = lane[1].merge_eager(lo, hi, num_heads, H, W, out)
        except RuntimeError as err:
            _ext_missed(err)
        else:
            if merged is not None:
                return merged
    native = _NATIVE if _NATIVE is not None else _load_native()
    if native:  # the artifact directory's native library: validation and launch in C++
        # Allocating calls on torch tensors: the extension allocates in C++ as well
        # (runtime/torch_ext.py); with out= the library call below is as short.
        ext = _torch_ext(native, lo, hi, num_heads, H, W) if out is None else None
        if ext is not None:
            try:
                return ext.merge(lo, hi, num_heads, H, W, out)
            except RuntimeError as err:
                _ext_missed(err)
        try:
            result = native.merge(lo, hi, num_heads, H, W, out)
        except _NATIVE_MISSES as err:
            _native_missed(err)
        else:
            if out is not None:
                return out
            if isinstance(result, native.tensor_type):  # no caller allocator: not torch input
                return native_rt.as_framework_array(lo, result)
            return result
    # Checked before the cache lookup: 4.0 == 4 and True == 1 would hit a validated entry.
    check_count("num_heads", num_heads)
    check_count("H", H, minimum=0)
    check_count("W", W, minimum=0)
    lo_info, hi_info = tensor_info(lo, "lo"), tensor_info(hi, "hi")
    key = (lo_info.signature(), hi_info.signature(), num_heads, H, W)
    dims = _FORWARD_DIMS.get(key)
    if dims is None:
        dims = _FORWARD_DIMS.put(key, check_forward_inputs(lo_info, hi_info, num_heads, H, W))
    if out is None:  # fresh from the allocator: right by construction
        out = _empty_like(lo, dims.merged_shape)
        out_info = tensor_info(out, "out")
    else:
        out_info = tensor_info(out, "out")
        out_key = (key, out_info.signature())
        if out_key not in _CHECKED_OUTPUTS:
            check_output("out", out_info, dims.merged_shape, "lo", lo_info)
            _CHECKED_OUTPUTS.put(out_key, True)
        check_no_overlap("out", out_info, "lo", lo_info)
        check_no_overlap("out", out_info, "hi", hi_info)
    if dims.merged_numel == 0:
        return out
    if lo_info.device == CUDA:
        _runtime_op(dims.key_dim, num_heads, lo_info.dtype).launch_forward(
            lo_info, hi_info, out_info, _current_stream(lo_info), (H, W))
    elif lo_info.device == CPU:
        cpu_kernels(_config(dims.key_dim, num_heads, lo_info.dtype)).forward(
            lo, hi, _reshape(out, _five(dims)), dims.n)
    else:
        raise ValueError(f"lo: expected a CPU or CUDA tensor, got device {lo_info.device}")
    return out


def merge_backward(d_merged: Any, num_heads: int, key_dim: int, *, d_lo: Any = None,
                   d_hi: Any = None) -> tuple[Any, Any]:
    """The inverse gather: ``d_merged [B, c, H, W]`` -> ``(d_lo, d_hi)``, ``[B*nh, H*W, kd]``."""
    lane = torch_ext.LANE
    if lane is not None and lane[0] is _NATIVE and not lane[2]():
        try:  # the extension's eager lane (as in merge)
            grads = lane[1].merge_backward_eager(d_merged, num_heads, key_dim, d_lo, d_hi)
        except RuntimeError as err:
            _ext_missed(err)
        else:
            if grads is not None:
                return grads
    native = _NATIVE if _NATIVE is not None else _load_native()
    if native:
        ext = (_torch_ext(native, d_merged, d_lo if d_hi is None else d_hi, num_heads, key_dim)
               if d_lo is None or d_hi is None else None)
        if ext is not None:
            try:
                return ext.merge_backward(d_merged, num_heads, key_dim, d_lo, d_hi)
            except RuntimeError as err:
                _ext_missed(err)
        try:
            result = native.merge_backward_grads(d_merged, num_heads, key_dim, d_lo, d_hi)
        except _NATIVE_MISSES as err:
            _native_missed(err)
        else:
            if result is None:  # both given
                return d_lo, d_hi
            new_lo, new_hi = result
            if isinstance(new_lo if d_lo is None else new_hi, native.tensor_type):
                new_lo, new_hi = (None if x is None else
                                  native_rt.as_framework_array(d_merged, x)
                                  for x in (new_lo, new_hi))
            return (d_lo if d_lo is not None else new_lo, d_hi if d_hi is not None else new_hi)
    check_count("num_heads", num_heads)
    check_count("key_dim", key_dim)
    g_info = tensor_info(d_merged, "d_merged")
    key = (g_info.signature(), num_heads, key_dim)
    dims = _BACKWARD_DIMS.get(key)
    if dims is None:
        dims = _BACKWARD_DIMS.put(key, check_backward_input(g_info, num_heads, key_dim))
    outputs, infos = [], []
    for name, given in (("d_lo", d_lo), ("d_hi", d_hi)):
        if given is None:  # fresh from the allocator: right by construction
            given = _empty_like(d_merged, dims.half_shape)
            infos.append(tensor_info(given, name))
        else:
            info = tensor_info(given, name)
            out_key = (key, name, info.signature())
            if out_key not in _CHECKED_OUTPUTS:
                check_output(name, info, dims.half_shape, "d_merged", g_info)
                _CHECKED_OUTPUTS.put(out_key, True)
            check_no_overlap(name, info, "d_merged", g_info)
            infos.append(info)
        outputs.append(given)
    if d_lo is not None or d_hi is not None:
        check_no_overlap("d_hi", infos[1], "d_lo", infos[0])
    d_lo, d_hi = outputs
    if dims.merged_numel == 0:
        return d_lo, d_hi
    if g_info.device == CUDA:
        _runtime_op(key_dim, num_heads, g_info.dtype).launch_backward(
            g_info, infos[0], infos[1], _current_stream(g_info))
    elif g_info.device == CPU:
        g5 = _reshape(d_merged, _five(dims))
        cpu_kernels(_config(key_dim, num_heads, g_info.dtype)).backward(g5, d_lo, d_hi, dims.n)
    else:
        raise ValueError(f"d_merged: expected a CPU or CUDA tensor, got device {g_info.device}")
    return d_lo, d_hi


# The default artifact directory's native library: None until looked up, then the library, or
# False when there is none (then the Python launcher and the CPU libraries run every call).
_NATIVE: native_rt.NativeLibrary | bool | None = None


def _load_native(refresh: bool = False) -> native_rt.NativeLibrary | bool:
    global _NATIVE
    _NATIVE = native_rt.load(env.default_artifacts_dir(), refresh=refresh) or False
    return _NATIVE


def _native_missed(err: Exception) -> None:
    """The library cannot take this call. No build for it: look again (a build may just have
    written a new library) and run the Python path. Arguments tvm-ffi cannot convert (not a
    tensor, a read-only array): the Python path runs and explains."""
    if isinstance(err, native_rt.NativeArtifactNotFound):
        _load_native(refresh=True)
    elif isinstance(err, TypeError) and not str(err).startswith("Mismatched"):
        raise err  # the library's own refusal
    elif isinstance(err, RuntimeError) and "Cannot pack tensors" not in str(err):
        raise err  # only torch's refusal to export (meta tensors...) falls through


def _torch_ext(native: native_rt.NativeLibrary, first: Any, second: Any, a: Any, b: Any,
               c: Any = 0) -> Any:
    """The PyTorch extension bound to ``native`` when this call can take it: plain torch
    tensors (``second`` may be None), int counts ``a``, ``b``, ``c``, eager with no dispatch or
    function mode; else None. (Spelled out, not a loop: this runs on every call.)"""
    tensor = _TORCH_TENSOR[0]
    if tensor is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        _TORCH_TENSOR[:] = [torch.Tensor, torch._C, torch.compiler.is_compiling]
        tensor = torch.Tensor
    if (type(first) is not tensor or (type(second) is not tensor and second is not None)
            or type(a) is not int or type(b) is not int or type(c) is not int):
        return None
    _, c_api, is_compiling = _TORCH_TENSOR
    if (c_api._len_torch_dispatch_stack() or c_api._is_torch_function_mode_enabled()
            or is_compiling()):
        return None
    module = torch_ext.module_for(native.path, may_build=first.is_cuda)
    if module is not None:
        torch_ext.open_lane(native, module)
    return module


# torch.Tensor, torch._C, torch.compiler.is_compiling once torch is imported (ops does not
# import torch itself: numpy and CuPy users may not have it)
_TORCH_TENSOR: list = [None, None, None]


def _ext_missed(err: RuntimeError) -> None:
    """The extension's call failed: a missing build looks again and lets the next path run
    (as :func:`_native_missed`); any other error is the caller's."""
    if not str(err).startswith("PsaArtifactNotFound"):
        raise err
    _load_native(refresh=True)


def _forget_native() -> None:
    global _NATIVE
    _NATIVE = None


native_rt.ON_FORGET.append(_forget_native)
native_rt.ON_FORGET.append(torch_ext.forget)
_NATIVE_MISSES = (native_rt.NativeArtifactNotFound, BufferError, TypeError, RuntimeError)


@lru_cache(maxsize=64)
def _runtime_op(key_dim: int, num_heads: int, dtype: str):
    from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp

    return PsaMergeAttnRuntimeOp(key_dim, num_heads, dtype)


# Validation depends only on geometry, dtype, device and alignment: remember what passed
# (outputs by the inputs' key and their own signature; overlap, which depends on the
# addresses, is checked on every call).
_FORWARD_DIMS = Memo()
_BACKWARD_DIMS = Memo()
_CHECKED_OUTPUTS = Memo()


@lru_cache(maxsize=256)
def _config(key_dim: int, num_heads: int, dtype: str) -> OpConfig:
    """One OpConfig per configuration: the CPU path looks its kernels up on every call."""
    return OpConfig(key_dim, num_heads, dtype)


def _five(dims: MergeDims) -> tuple[int, ...]:
    return (dims.batch, dims.num_heads, 2, dims.key_dim, dims.n)


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _empty_like(like: Any, shape: tuple[int, ...]) -> Any:
    if _is_torch(like):
        return like.new_empty(shape)
    import numpy as np

    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype=like.dtype)
    raise TypeError(f"cannot allocate an output like {type(like).__name__}: pass it in")


def _reshape(x: Any, shape: tuple[int, ...]) -> Any:
    return x.view(shape) if _is_torch(x) else x.reshape(shape)


def _current_stream(info: TensorInfo) -> int:
    """torch's current stream on the tensor's device; the legacy stream without torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object: cheaper
    if raw is not None:
        return raw(info.device_index)
    return torch.cuda.current_stream(info.device_index).cuda_stream
