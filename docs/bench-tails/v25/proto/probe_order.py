"""Prototype probe (docs/perf.md v25, call 2): the forward's CTAs (and each CTA's rows) taken in
other orders (order.cu), for the row kernel and the whole-block bulk-copy kernel, beside the
shipped kernel and the copy of the kernel's own buffers (probe_tma.run).

    PYTHONPATH=. python3 docs/bench-tails/v25/proto/probe_order.py order.so OUT.json
"""

from __future__ import annotations

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_tma import run

CASES = [  # (pass, num_heads, dtype, batch, height, width)
    ("fwd", 4, "float32", 64, 8, 37), ("fwd", 4, "float32", 64, 20, 15),
    ("fwd", 4, "float32", 64, 16, 19), ("fwd", 4, "float32", 16, 20, 15),
    ("fwd", 4, "float32", 16, 37, 29), ("fwd", 4, "float32", 64, 20, 20),
    ("fwd", 4, "float16", 64, 48, 19), ("fwd", 4, "float16", 64, 40, 23),
    ("fwd", 4, "float16", 64, 32, 29), ("fwd", 4, "float16", 64, 40, 27),
    ("fwd", 4, "float16", 16, 40, 23), ("fwd", 4, "float16", 64, 37, 29),
    ("fwd", 6, "float16", 64, 20, 20),
]
ROW_KERNELS = {
    4: [("order", f"row_f_T{tile}_t{threads}_o{order}") for tile, threads in ((128, 256), (64, 128))
        for order in range(5)],
    2: [("order", f"row_h_T256_t256_o{order}") for order in range(5)],
}
BLOCK_KERNELS = {
    ("fwd", 4): [("order", f"block_f_t256_o{order}") for order in range(4)],
    ("fwd", 2): [("order", f"block_h_t512_o{order}") for order in range(4)],
}

if __name__ == "__main__":
    run({"order": ctypes.CDLL(sys.argv[1])}, CASES, (ROW_KERNELS, BLOCK_KERNELS), sys.argv[2])
