"""Named sets of configurations: the YOLO11 PSA blocks, and the coverage matrix of the tests."""

from __future__ import annotations

from dataclasses import dataclass

from psa_tvm.config import DTYPE_ITEMSIZE, OpConfig

DTYPES = tuple(DTYPE_ITEMSIZE)


@dataclass(frozen=True)
class YoloPsa:
    """One YOLO11 model's C2PSA attention: ``c = 64 * num_heads`` channels, key_dim 32."""

    model: str
    num_heads: int
    key_dim: int = 32


# C2PSA(c1=c2=min(1024*width, max_channels)) runs PSABlock(c = c2/2, num_heads = c/64) on the
# stride-32 feature map; head_dim 64, key_dim = head_dim / 2.
YOLO11 = (YoloPsa("n", 2), YoloPsa("s", 4), YoloPsa("m", 4), YoloPsa("l", 4), YoloPsa("x", 6))

# Every key_dim and num_heads the tests name, in every dtype, without the full product.
_COVERAGE = ((8, 1), (16, 3), (32, 2), (32, 4), (32, 6), (64, 2), (128, 8))

PRESETS: dict[str, tuple[OpConfig, ...]] = {
    "yolo11": tuple(dict.fromkeys(OpConfig(p.key_dim, p.num_heads, d)
                                  for p in YOLO11 for d in DTYPES)),
    "tests": tuple(OpConfig(kd, nh, d) for kd, nh in _COVERAGE for d in DTYPES),
}
