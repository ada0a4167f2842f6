"""The per-build configuration of the op: what is fixed when a kernel is compiled."""

from __future__ import annotations

from dataclasses import dataclass

#: Element types the op is built for, with their size in bytes.
DTYPE_ITEMSIZE: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}

#: Largest element count an int32-indexed kernel may address.
INT32_MAX = 2**31 - 1


def canonical_dtype(dtype: object) -> str:
    """Turn ``torch.float16``, ``numpy.float32``, ``"bf16"``... into a key of ``DTYPE_ITEMSIZE``."""
    name = str(dtype).removeprefix("torch.").removeprefix("dtype(").strip("')\"")
    name = {"half": "float16", "fp16": "float16", "float": "float32", "fp32": "float32",
            "bf16": "bfloat16"}.get(name, name)
    if name not in DTYPE_ITEMSIZE:
        raise TypeError(
            f"dtype: expected one of {sorted(DTYPE_ITEMSIZE)}, got {dtype!r}"
        )
    return name


@dataclass(frozen=True)
class OpConfig:
    """``key_dim``, ``num_heads`` and element type of one PSA merge build."""

    key_dim: int
    num_heads: int
    dtype: str = "float32"

    def __post_init__(self) -> None:
        for arg in ("key_dim", "num_heads"):
            value = getattr(self, arg)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{arg}: expected a positive int, got {value!r}")
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    @property
    def channels(self) -> int:
        """Channels of the merged tensor, ``c = 2 * num_heads * key_dim``."""
        return 2 * self.num_heads * self.key_dim

    @property
    def itemsize(self) -> int:
        return DTYPE_ITEMSIZE[self.dtype]

    def merged_bytes(self, batch: int, height: int, width: int) -> int:
        """Bytes of the merged tensor ``[B, c, H, W]``: what each pass reads once and writes
        once (the benchmark's and the tuning tool's size of a shape)."""
        return batch * self.channels * height * width * self.itemsize

    @property
    def tag(self) -> str:
        """A file-name-safe identifier, e.g. ``kd32_nh4_float16``."""
        return f"kd{self.key_dim}_nh{self.num_heads}_{self.dtype}"
