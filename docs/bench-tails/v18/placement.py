"""Does kernel time / copy time depend on where the tensors sit in memory? (docs/perf.md v18)

One 1 GiB pool; for each offset a shape's tensors are carved from it back to back (4 KiB
aligned) from that offset on; copy, forward and backward timed with the profiler (L2 flushed,
median of REPS runs). Offset 0 is timed three times (the noise at one placement). Tidied
after the run (same shapes, offsets and carving order).

    PSA_TVM_ARTIFACTS=ART python3 placement.py OUT.json
"""
import json
import os
import sys

import torch

from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

REPS = 10
SHAPES = (  # dtype, B, nh, H, W
    ("float16", 64, 4, 40, 40), ("float16", 64, 2, 20, 20), ("float16", 16, 6, 20, 20),
    ("float16", 64, 4, 40, 23), ("float16", 64, 4, 37, 29), ("float32", 64, 4, 20, 15),
    ("float16", 64, 4, 20, 20),
)
MB = 1 << 20
OFFSETS = (0, 0, 0, 4096, 65536, 262144, MB, 2 * MB, 6 * MB, 30 * MB, 126 * MB + 12288,
           510 * MB)
DTYPES = {"float16": torch.float16, "float32": torch.float32}


def carve_all(pool: torch.Tensor, offset: int, dtype: torch.dtype, shapes: list) -> list:
    """Tensors of ``shapes`` in ``pool`` from byte ``offset`` on, each 4 KiB aligned."""
    tensors, cursor = [], offset
    for shape in shapes:
        nbytes = dtype.itemsize * int(torch.tensor(shape).prod())
        tensors.append(pool[cursor:cursor + nbytes].view(dtype).view(shape))
        cursor = (cursor + nbytes + 4095) // 4096 * 4096
    if cursor > pool.numel():
        raise ValueError(f"offset {offset}: the tensors need {cursor} bytes")
    return tensors


def time_one(prof, stream, op, dtype, batch, nh, height, width, tensors) -> dict:
    lo, hi, merged, grad, dlo, dhi, src, dst = tensors
    for t in (lo, hi, grad, src):
        t.normal_()
    fns = {"copy": lambda: dst.copy_(src),
           "fwd": lambda: op.launch_forward(lo, hi, merged, stream, (height, width)),
           "bwd": lambda: op.launch_backward(grad, dlo, dhi, stream)}
    times = {k: prof.median_us(f) for k, f in fns.items()}
    return {**times, "fwd_ratio": times["fwd"] / times["copy"],
            "bwd_ratio": times["bwd"] / times["copy"]}


def main(out_path: str) -> None:
    pool = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    prof = KernelProfiler(GpuTimer(reps=REPS), reps=REPS)
    stream = torch.cuda.current_stream().cuda_stream
    records = []
    for dtype_name, batch, nh, height, width in SHAPES:
        dtype, n, kd = DTYPES[dtype_name], height * width, 32
        op = PsaMergeAttnRuntimeOp(kd, nh, dtype_name, schedule="tiled",
                                   artifacts=os.environ["PSA_TVM_ARTIFACTS"])
        half, merged = (batch * nh, n, kd), (batch, 2 * nh * kd, height, width)
        flat = (2 * batch * nh * n * kd,)
        for offset in OFFSETS:
            tensors = carve_all(pool, offset, dtype,
                                [half, half, merged, merged, half, half, flat, flat])
            record = {"dtype": dtype_name, "shape": [batch, nh, height, width],
                      "offset": offset,
                      **time_one(prof, stream, op, dtype, batch, nh, height, width, tensors)}
            records.append(record)
            print(f"{dtype_name} {batch}x{nh}x{height}x{width} off={offset:>10d} "
                  f"copy={record['copy']:7.2f} fwd={record['fwd']:7.2f} "
                  f"[{record['fwd_ratio']:.3f}] bwd={record['bwd']:7.2f} "
                  f"[{record['bwd_ratio']:.3f}]", flush=True)
    with open(out_path, "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
