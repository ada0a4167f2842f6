"""Argument checks shared by every entry point (functions, RuntimeOp, torch op).

Every check runs before any kernel launch or output write, and every error names the argument,
what was expected and what was received.
"""

from __future__ import annotations

from dataclasses import dataclass

from psa_tvm.config import DTYPE_ITEMSIZE, OpConfig
from psa_tvm.runtime.tensors import TensorInfo


@dataclass(frozen=True)
class MergeDims:
    """Concrete sizes of one call; ``lo``/``hi`` are ``[batch*num_heads, n, key_dim]``."""

    batch: int
    num_heads: int
    key_dim: int
    height: int | None
    width: int | None
    n: int

    @property
    def channels(self) -> int:
        return 2 * self.num_heads * self.key_dim

    @property
    def half_shape(self) -> tuple[int, int, int]:
        """Shape of ``lo``, ``hi``, ``d_lo`` and ``d_hi``."""
        return (self.batch * self.num_heads, self.n, self.key_dim)

    @property
    def merged_shape(self) -> tuple[int, ...]:
        if self.height is None or self.width is None:
            return (self.batch, self.channels, self.n)
        return (self.batch, self.channels, self.height, self.width)

    @property
    def merged_numel(self) -> int:
        return self.batch * self.channels * self.n


def check_count(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


def check_dtype(name: str, t: TensorInfo, expected: str | None = None) -> None:
    if t.dtype is None:
        return
    if t.dtype not in DTYPE_ITEMSIZE:
        raise TypeError(f"{name}: expected dtype in {sorted(DTYPE_ITEMSIZE)}, got {t.dtype}")
    if expected is not None and t.dtype != expected:
        raise TypeError(f"{name}: expected dtype {expected}, got {t.dtype}")


def check_layout(name: str, t: TensorInfo) -> None:
    """Contiguous, row-major, element-aligned; negative or padded strides are refused."""
    if t.strides is not None and any(s < 0 for s in t.strides):
        raise ValueError(f"{name}: expected non-negative strides, got {list(t.strides)}")
    if not t.is_contiguous():
        raise ValueError(
            f"{name}: expected a contiguous tensor, got strides {list(t.strides or ())} for "
            f"shape {list(t.shape)} (call .contiguous() first)"
        )
    if t.dtype is not None and t.numel and t.ptr % DTYPE_ITEMSIZE[t.dtype]:
        raise ValueError(
            f"{name}: data pointer {t.ptr:#x} is not aligned to its {DTYPE_ITEMSIZE[t.dtype]}-byte "
            "element size"
        )


def check_same_device(name: str, t: TensorInfo, ref_name: str, ref: TensorInfo) -> None:
    if (t.device, t.device_index) != (ref.device, ref.device_index):
        raise ValueError(
            f"{name}: expected the device of {ref_name} ({ref.device}"
            f"{'' if ref.device_index is None else f':{ref.device_index}'}), got {t.device}"
            f"{'' if t.device_index is None else f':{t.device_index}'}"
        )


def check_rank(name: str, t: TensorInfo, rank: int, layout: str) -> None:
    if len(t.shape) != rank:
        raise ValueError(f"{name}: expected a {rank}-D tensor {layout}, got shape {list(t.shape)}")


def check_forward_inputs(lo: TensorInfo, hi: TensorInfo, num_heads: int, height: int,
                         width: int, config: OpConfig | None = None) -> MergeDims:
    """Check ``lo``/``hi`` for a forward merge into ``[B, c, height, width]``."""
    check_count("num_heads", num_heads)
    check_count("H", height, minimum=0)
    check_count("W", width, minimum=0)
    layout = "[B*num_heads, H*W, key_dim]"
    check_rank("lo", lo, 3, layout)
    check_rank("hi", hi, 3, layout)
    if lo.shape != hi.shape:
        raise ValueError(f"hi: expected the shape of lo {list(lo.shape)}, got {list(hi.shape)}")
    if lo.dtype != hi.dtype:
        raise TypeError(f"hi: expected the dtype of lo ({lo.dtype}), got {hi.dtype}")
    check_dtype("lo", lo, config.dtype if config else None)
    check_same_device("hi", hi, "lo", lo)
    rows, n, key_dim = lo.shape
    if rows % num_heads:
        raise ValueError(
            f"lo: expected dim 0 (B*num_heads) divisible by num_heads={num_heads}, got {rows}"
        )
    if n != height * width:
        raise ValueError(
            f"lo: expected dim 1 == H*W = {height}*{width} = {height * width}, got {n}")
    if config is not None:
        if num_heads != config.num_heads:
            raise ValueError(f"num_heads: this op is built for {config.num_heads}, got {num_heads}")
        if key_dim != config.key_dim:
            raise ValueError(f"lo: expected dim 2 == key_dim = {config.key_dim}, got {key_dim}")
    elif key_dim < 1:
        raise ValueError(f"lo: expected dim 2 (key_dim) >= 1, got {key_dim}")
    check_layout("lo", lo)
    check_layout("hi", hi)
    return MergeDims(rows // num_heads, num_heads, key_dim, height, width, n)


def check_backward_input(grad: TensorInfo, num_heads: int, key_dim: int,
                         config: OpConfig | None = None) -> MergeDims:
    """Check ``d_merged`` (``[B, c, H, W]``, or ``[B, c, N]``) for the backward pass."""
    check_count("num_heads", num_heads)
    check_count("key_dim", key_dim)
    if config is not None:
        if num_heads != config.num_heads:
            raise ValueError(f"num_heads: this op is built for {config.num_heads}, got {num_heads}")
        if key_dim != config.key_dim:
            raise ValueError(f"key_dim: this op is built for {config.key_dim}, got {key_dim}")
    if len(grad.shape) not in (3, 4):
        raise ValueError(
            f"d_merged: expected a 4-D tensor [B, c, H, W], got shape {list(grad.shape)}"
        )
    channels = 2 * num_heads * key_dim
    if grad.shape[1] != channels:
        raise ValueError(
            f"d_merged: expected dim 1 == 2*num_heads*key_dim = {channels}, got {grad.shape[1]}"
        )
    check_dtype("d_merged", grad, config.dtype if config else None)
    check_layout("d_merged", grad)
    height, width = (grad.shape[2], grad.shape[3]) if len(grad.shape) == 4 else (None, None)
    n = grad.shape[2] if height is None else height * width
    return MergeDims(grad.shape[0], num_heads, key_dim, height, width, n)


def check_output(name: str, t: TensorInfo, shape: tuple[int, ...], ref_name: str,
                 ref: TensorInfo) -> None:
    """A caller-provided output: right shape, dtype and device, contiguous.

    A merged output may be ``[B, c, H, W]`` where ``[B, c, N]`` is expected (same memory).
    """
    spatial_view = (len(shape) == 3 and len(t.shape) == 4 and t.shape[:2] == shape[:2]
                    and t.shape[2] * t.shape[3] == shape[2])
    if t.shape != shape and not spatial_view:
        raise ValueError(f"{name}: expected shape {list(shape)}, got {list(t.shape)}")
    if t.dtype != ref.dtype:
        raise TypeError(f"{name}: expected dtype {ref.dtype} (that of {ref_name}), got {t.dtype}")
    check_same_device(name, t, ref_name, ref)
    check_layout(name, t)



def check_no_overlap(name: str, t: TensorInfo, other_name: str, other: TensorInfo) -> None:
    """Outputs must not share memory with inputs: the kernels read and write in one pass."""
    if t.dtype is None or other.dtype is None or not t.numel or not other.numel:
        return
    end = t.ptr + t.numel * DTYPE_ITEMSIZE[t.dtype]
    other_end = other.ptr + other.numel * DTYPE_ITEMSIZE[other.dtype]
    if t.ptr < other_end and other.ptr < end and t.device == other.device:
        raise ValueError(f"{name}: expected memory disjoint from {other_name}, but they overlap")
