"""Prototype probe (docs/perf.md v25, call 3): the band kernels (band.cu: a CTA owns ROWS whole
rows of the merged tensor, written or read in address order), beside the shipped kernel and the
copy of the kernel's own buffers, at call 1's shapes (probe_tma.run).

    PYTHONPATH=. python3 docs/bench-tails/v25/proto/probe_band.py band.so OUT.json
"""

from __future__ import annotations

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_tma import CASES, run

BAND_KERNELS = {
    ("fwd", 4): [("band", f"band_fwd_f_{k}") for k in
                 ("r8_t256_l8", "r8_t128_l8", "r16_t256_l8", "r16_t512_l8", "r32_t512_l16")],
    ("fwd", 2): [("band", f"band_fwd_h_{k}") for k in
                 ("r8_t256_l8", "r8_t128_l8", "r16_t256_l16", "r16_t512_l8", "r32_t512_l16")],
    ("bwd", 4): [("band", f"band_bwd_f_{k}") for k in ("r8_t256", "r16_t256", "r16_t512")],
    ("bwd", 2): [("band", f"band_bwd_h_{k}") for k in ("r8_t256", "r16_t256", "r16_t512")],
}
EXTRA = [("fwd", 2, "float16", 64, 40, 40), ("bwd", 2, "float16", 64, 40, 40),
         ("fwd", 2, "float16", 16, 20, 20), ("bwd", 4, "float32", 64, 20, 20)]

if __name__ == "__main__":
    run({"band": ctypes.CDLL(sys.argv[1])}, CASES + EXTRA, ({}, BAND_KERNELS), sys.argv[2])
