"""Prototype probe (docs/perf.md v25, call 8): the persistent register-staged forward over bands
(prband.cu), beside pblock.cu's whole-block kernel, the shipped kernel and the copy of the
kernel's own buffers, at call 1's forward shapes and two squares (probe_tma.run).

    PYTHONPATH=. python3 docs/bench-tails/v25/proto/probe_prband.py prband.so pblock.so OUT.json
"""

from __future__ import annotations

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_pband import FORWARD_CASES
from probe_tma import run

VARIANTS = ("r32_t512_b2", "r16_t512_b2", "r16_t256_b4", "r8_t512_b2", "r8_t256_b4")
KERNELS = {
    ("fwd", 4): [("prband", f"prband_fwd_f_{k}") for k in VARIANTS]
    + [("pblock", "pblock_fwd_f_t512_b2")],
    ("fwd", 2): [("prband", f"prband_fwd_h_{k}") for k in VARIANTS],
}

if __name__ == "__main__":
    run({"prband": ctypes.CDLL(sys.argv[1]), "pblock": ctypes.CDLL(sys.argv[2])}, FORWARD_CASES,
        ({}, KERNELS), sys.argv[3])
