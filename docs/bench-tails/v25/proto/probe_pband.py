"""Prototype probe (docs/perf.md v25, call 7): the persistent band forward staged by cp.async
(pband.cu), beside pblock.cu's register-staged kernel, the shipped kernel and the copy of the
kernel's own buffers, at call 1's forward shapes (probe_tma.run; a kernel whose two buffers do
not fit shared memory at a shape is left out there).

    PYTHONPATH=. python3 docs/bench-tails/v25/proto/probe_pband.py pband.so pblock.so OUT.json
"""

from __future__ import annotations

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_tma import CASES, run

KERNELS = {
    ("fwd", 4): [("pband", f"pband_fwd_f_{k}") for k in
                 ("r32_t256", "r32_t512", "r16_t256", "r8_t256")]
    + [("pblock", "pblock_fwd_f_t512_b2")],
    ("fwd", 2): [("pband", f"pband_fwd_h_{k}") for k in
                 ("r32_t256", "r32_t512", "r16_t256", "r8_t256")]
    + [("pblock", "pblock_fwd_h_t1024_b1")],
}
FORWARD_CASES = [c for c in CASES if c[0] == "fwd"] + [("fwd", 2, "float16", 64, 40, 40),
                                                       ("fwd", 2, "float16", 16, 20, 20)]

if __name__ == "__main__":
    run({"pband": ctypes.CDLL(sys.argv[1]), "pblock": ctypes.CDLL(sys.argv[2])}, FORWARD_CASES,
        ({}, KERNELS), sys.argv[3])
