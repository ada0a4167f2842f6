"""Prototype probe prepared for docs/perf.md v25 call 9 and NOT RUN (device time ran out):
prband.cu's 256/384-thread variants at 2-3 CTAs per SM, beside call 8's best, at the rows where
call 8's register stage spilled or lost.

    PYTHONPATH=. python3 docs/bench-tails/v25/proto/probe_prband9.py prband.so OUT.json
"""

from __future__ import annotations

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_tma import run

CASES = [
    ("fwd", 4, "float32", 64, 20, 15), ("fwd", 4, "float32", 16, 37, 29),
    ("fwd", 4, "float32", 64, 37, 29), ("fwd", 4, "float16", 64, 40, 23),
    ("fwd", 4, "float16", 64, 16, 67), ("fwd", 4, "float16", 64, 40, 27),
    ("fwd", 4, "float16", 64, 37, 29), ("fwd", 4, "float16", 16, 37, 29),
]
KERNELS = {
    ("fwd", 4): [("prband", f"prband_fwd_f_{k}") for k in
                 ("r32_t512_b2", "r8_t256_b4", "r8_t384_b2", "r16_t384_b2")],
    ("fwd", 2): [("prband", f"prband_fwd_h_{k}") for k in
                 ("r16_t256_b4", "r16_t512_b2", "r16_t256_b3", "r16_t384_b2", "r8_t384_b2")],
}

if __name__ == "__main__":
    run({"prband": ctypes.CDLL(sys.argv[1])}, CASES, ({}, KERNELS), sys.argv[2])
