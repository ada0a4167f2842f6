"""Prototype probe (docs/perf.md v26, call 1): v25's prepared call 9 (prband.cu's 256/384-thread
forwards at 2-3 CTAs per SM) and the register-staged band backward (prbwd.cu), beside the
shipped kernels and the copy of the kernel's own buffers (v25's probe_tma.run).

    PYTHONPATH=. python3 docs/bench-tails/v26/proto/probe_call1.py prband.so prbwd.so OUT.json
"""

from __future__ import annotations

import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "v25", "proto"))
from probe_prband9 import CASES as FORWARD_CASES  # noqa: E402
from probe_prband9 import KERNELS as FORWARD_KERNELS  # noqa: E402
from probe_tma import run  # noqa: E402

BACKWARD_CASES = [
    ("bwd", 4, "float16", 64, 37, 29), ("bwd", 4, "float16", 64, 40, 23),
    ("bwd", 4, "float16", 16, 37, 29), ("bwd", 4, "float16", 64, 16, 67),
    ("bwd", 4, "float16", 16, 40, 23), ("bwd", 4, "float16", 64, 20, 20),
    ("bwd", 4, "float32", 64, 20, 15), ("bwd", 4, "float32", 16, 37, 29),
    ("bwd", 4, "float32", 16, 20, 15),
]
BACKWARD_KERNELS = {
    ("bwd", 4): [("prbwd", f"prbwd_f_{k}") for k in
                 ("r32_t512_b2", "r16_t512_b2", "r16_t256_b4", "r8_t256_b4")],
    ("bwd", 2): [("prbwd", f"prbwd_h_{k}") for k in
                 ("r32_t512_b2", "r16_t512_b2", "r16_t256_b4", "r16_t384_b2", "r8_t256_b4",
                  "r8_t512_b2")],
}

if __name__ == "__main__":
    libs = {"prband": ctypes.CDLL(sys.argv[1]), "prbwd": ctypes.CDLL(sys.argv[2])}
    run(libs, FORWARD_CASES + BACKWARD_CASES, ({}, {**FORWARD_KERNELS, **BACKWARD_KERNELS}),
        sys.argv[3])
