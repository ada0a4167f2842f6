"""A uniform, zero-copy view of whatever tensor the caller passes.

The RuntimeOp accepts the seed's ``(raw_pointer, shape)`` pairs, torch tensors (read directly,
the fast path), and any object with ``__dlpack__`` (CuPy, numpy, TVM, JAX...), whose DLTensor
header is read through ctypes without taking ownership. Nothing here imports torch or TVM.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

from psa_tvm.config import DTYPE_ITEMSIZE

CPU, CUDA = "cpu", "cuda"
_DL_DEVICE = {1: CPU, 2: CUDA, 3: CPU}  # kDLCPU, kDLCUDA, kDLCUDAHost
_DL_DTYPE = {(2, 32): "float32", (2, 16): "float16", (4, 16): "bfloat16", (2, 64): "float64",
             (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8", (0, 8): "int8", (6, 1): "bool"}


@dataclass(slots=True)
class TensorInfo:
    """Address, geometry and placement of one tensor argument (strides in elements)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # None: unknown, assumed contiguous (raw pointer pairs)
    dtype: str | None  # None: unknown (raw pointer pairs)
    device: str | None  # "cpu", "cuda", or None when unknown
    device_index: int | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def is_contiguous(self) -> bool:
        if self.strides is None or self.numel == 0:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def signature(self) -> tuple:
        """Everything validation looks at except the address (its low bits stand in for it)."""
        return (self.shape, self.strides, self.dtype, self.device, self.device_index,
                self.ptr & 15)

    def describe(self) -> str:
        where = self.device if self.device_index is None else f"{self.device}:{self.device_index}"
        return f"shape {list(self.shape)}, dtype {self.dtype}, device {where}"


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj: object, name: str) -> TensorInfo:
    try:
        capsule = obj.__dlpack__()
    except BufferError as err:  # e.g. numpy refuses to export read-only arrays
        raise ValueError(f"{name}: cannot be shared through DLPack ({err}); pass a writable, "
                         "contiguous array") from err
    # DLManagedTensor starts with its DLTensor; the capsule stays unconsumed, so the producer
    # keeps ownership and frees it when the capsule is collected.
    header = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    shape = tuple(header.shape[i] for i in range(header.ndim))
    strides = tuple(header.strides[i] for i in range(header.ndim)) if header.strides else None
    dtype = _DL_DTYPE.get((header.dtype.code, header.dtype.bits), f"dl{header.dtype.code}:"
                          f"{header.dtype.bits}")
    if header.dtype.lanes != 1:
        raise TypeError(f"{name}: vector dtypes (lanes={header.dtype.lanes}) are not supported")
    device = _DL_DEVICE.get(header.device.device_type, f"dl{header.device.device_type}")
    return TensorInfo(ptr=(header.data or 0) + header.byte_offset, shape=shape, strides=strides,
                      dtype=dtype, device=device,
                      device_index=header.device.device_id if device == CUDA else None)


_TORCH_DTYPES: dict = {}


def _from_torch(t, name: str) -> TensorInfo:
    dtype = _TORCH_DTYPES.get(t.dtype)
    if dtype is None:
        dtype = _TORCH_DTYPES[t.dtype] = str(t.dtype).removeprefix("torch.")
    index = t.get_device()  # -1 off CUDA; cheaper than building a torch.device
    if index >= 0 and t.is_cuda:
        return TensorInfo(ptr=t.data_ptr(), shape=tuple(t.shape), strides=t.stride(),
                          dtype=dtype, device=CUDA, device_index=index)
    # is_cpu first: t.device builds a torch.device, about a sixth of this call
    return TensorInfo(ptr=t.data_ptr(), shape=tuple(t.shape), strides=t.stride(), dtype=dtype,
                      device=CPU if t.is_cpu else t.device.type, device_index=None)


def tensor_info(obj: object, name: str) -> TensorInfo:
    """Describe ``obj`` (``name`` in errors): a tensor, a DLPack object or ``(ptr, shape)``."""
    if isinstance(obj, TensorInfo):
        return obj
    if type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr"):
        return _from_torch(obj, name)
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], int):
        ptr, shape = obj
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"{name}: shape {list(shape)} has a negative extent")
        return TensorInfo(ptr=ptr, shape=shape, strides=None, dtype=None, device=None)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, name)
    raise TypeError(
        f"{name}: expected a tensor (torch, or any object with __dlpack__) or a "
        f"(pointer, shape) pair, got {type(obj).__name__}"
    )


def itemsize(dtype: str) -> int:
    return DTYPE_ITEMSIZE[dtype]
