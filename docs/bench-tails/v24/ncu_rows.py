"""One launch of each forward under Nsight Compute (docs/perf.md v24): DRAM bytes read and
written and L2 write sectors of the shipped kernel, the sector-exact prototype and the plain row
prototype, at rows that are whole 32-byte sectors and rows that are not.

    ncu --metrics ... python3 docs/bench-tails/v24/ncu_rows.py .gpu/sector.so .gpu/proto.so [dirty]

With ``dirty`` (run under ``ncu --cache-control none``), each launch follows a zeroed 256 MB buffer,
as in the benchmark: the kernel starts with L2 full of dirty lines, and its DRAM counters include
the write-back it causes.
"""

from __future__ import annotations

import ctypes
import sys

import torch

from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import L2_FLUSH_BYTES, merge_halves

CASES = [  # (num_heads, dtype, batch, height, width, prototype (tile, threads))
    (4, "float32", 64, 8, 37, (128, 256)), (4, "float32", 64, 20, 15, (128, 256)),
    (4, "float32", 64, 16, 19, (128, 256)),
    (4, "float16", 64, 48, 19, (256, 256)), (4, "float16", 64, 40, 23, (256, 256)),
    (4, "float16", 64, 37, 29, None),
]


def main() -> None:
    sector, proto = ctypes.CDLL(sys.argv[1]), ctypes.CDLL(sys.argv[2])
    dirty = sys.argv[3:] == ["dirty"]
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def dirty_l2() -> None:
        if dirty:
            flush.zero_()
            torch.cuda.synchronize()

    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    for nh, dtype_name, batch, height, width, tiles in CASES:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=".artifacts")
        inputs = merge_halves(rows, n, 32, dtype, gen)
        merged = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
        print(f"case nh{nh} {dtype_name} {batch}x{height}x{width} N={n}", flush=True)
        if dirty:  # a first launch loads the module, so the flush is the last thing before
            op.launch_forward(inputs[0], inputs[1], merged, stream, (height, width))
            dirty_l2()
        op.launch_forward(inputs[0], inputs[1], merged, stream, (height, width))
        if tiles is not None:
            tag, vec = ("h", 8) if dtype.itemsize == 2 else ("f", 4)
            args = (ctypes.c_void_p(inputs[0].data_ptr()), ctypes.c_void_p(inputs[1].data_ptr()),
                    ctypes.c_void_p(merged.data_ptr()), ctypes.c_int(rows), ctypes.c_int(n),
                    ctypes.c_void_p(stream))
            dirty_l2()
            getattr(sector, f"sector_{tag}_T{tiles[0]}_t{tiles[1]}")(*args)
            dirty_l2()
            getattr(proto, f"fwd_{tag}_T{tiles[0]}_v{vec}_t{tiles[1]}_row")(*args)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
