"""Prototype probe (docs/perf.md v25, call 6): the persistent whole-block forward (pblock.cu),
beside tma.cu's block kernels, the shipped kernel and the copy of the kernel's own buffers, at
call 1's forward shapes whose block fits the prototype's registers (float32 N <= 640, 16-bit
N <= 1280; probe_tma.run).

    PYTHONPATH=. python3 docs/bench-tails/v25/proto/probe_pblock.py pblock.so tma.so OUT.json
"""

from __future__ import annotations

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_tma import CASES, run

KERNELS = {
    ("fwd", 4): [("pblock", f"pblock_fwd_f_{k}") for k in ("t512_b1", "t512_b2", "t1024_b1")]
    + [("tma", "block_tma_f_t256"), ("tma", "block_lin_f_t512")],
    ("fwd", 2): [("pblock", f"pblock_fwd_h_{k}") for k in ("t512_b1", "t512_b2", "t1024_b1")]
    + [("tma", "block_tma_h_t512"), ("tma", "block_lin_h_t512")],
}
LIMIT_N = {"float32": 640, "float16": 1280}
FORWARD_CASES = [c for c in CASES if c[0] == "fwd" and c[4] * c[5] <= LIMIT_N[c[2]]]

if __name__ == "__main__":
    run({"pblock": ctypes.CDLL(sys.argv[1]), "tma": ctypes.CDLL(sys.argv[2])}, FORWARD_CASES,
        ({}, KERNELS), sys.argv[3])
