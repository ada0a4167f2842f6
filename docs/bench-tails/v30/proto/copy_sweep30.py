"""The copy floor against the byte count (docs/perf.md v30, call 3): profiler times of torch's
D2D ``copy_`` (cudaMemcpyAsync) and of an elementwise copy kernel (``torch.mul(src, 1, out=)``)
at byte counts around float32 16x37x29's 17,580,032 (a multiple of 4 KiB) and at the float32
37x29 calls of batch 10-20, beside the shipped forward at those batches. Every copy is timed
as the benchmark times it: L2 flushed, GPU spun, medians of 20 runs (tools/timing.py).

    PYTHONPATH=. python3 docs/bench-tails/v30/proto/copy_sweep30.py ARTIFACTS OUT.json
"""

from __future__ import annotations

import json
import sys

import torch

from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler, merge_halves

BASE = 17_580_032  # bytes of lo + hi at float32 16x37x29 (4292 * 4096)
OFFSETS = (-65536, -8192, -4096, -2048, -1024, -512, -256, -128, -64, -16, 0, 16, 64, 128, 256,
           512, 1024, 2048, 4096, 8192, 65536)


def main(root: str, out_path: str) -> None:
    prof = KernelProfiler(GpuTimer(reps=5), reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    big_src = torch.randn((BASE + 65536) // 4, device="cuda", generator=gen)
    big_dst = torch.empty_like(big_src)
    rows = []
    for offset in OFFSETS:
        count = (BASE + offset) // 4
        src, dst = big_src[:count], big_dst[:count]
        memcpy = prof.median_us(lambda src=src, dst=dst: dst.copy_(src))
        kernel = prof.median_us(lambda src=src, dst=dst: torch.mul(src, 1, out=dst))
        rows.append({"bytes": 4 * count, "offset": offset, "memcpy_us": memcpy,
                     "elementwise_us": kernel})
        print(f"bytes {4 * count:10d} ({offset:+6d})  memcpy {memcpy:7.3f} us "
              f"{2 * 4 * count / memcpy / 1e6:5.2f} TB/s  elementwise {kernel:7.3f} us "
              f"{2 * 4 * count / kernel / 1e6:5.2f} TB/s", flush=True)
    op = PsaMergeAttnRuntimeOp(32, 4, "float32", schedule="tiled", artifacts=root)
    stream = torch.cuda.current_stream().cuda_stream
    for batch in range(10, 21):
        halves = merge_halves(batch * 4, 1073, 32, torch.float32, gen)
        out = torch.empty(batch, 256, 37, 29, device="cuda")
        memcpy = prof.median_us(lambda h=halves, o=out: o.view(-1).copy_(h.view(-1)))
        kernel = prof.median_us(lambda h=halves, o=out: torch.mul(h.view(-1), 1,
                                                                 out=o.view(-1)))
        fwd = prof.median_us(lambda h=halves, o=out: op.launch_forward(h[0], h[1], o, stream,
                                                                       (37, 29)))
        moved = 2 * halves.numel() * 4
        rows.append({"batch": batch, "bytes": moved // 2, "memcpy_us": memcpy,
                     "elementwise_us": kernel, "forward_us": fwd})
        print(f"float32 {batch:2d}x37x29 bytes {moved // 2:10d} (4 KiB multiple: "
              f"{moved // 2 % 4096 == 0})  memcpy {memcpy:7.3f} us {moved / memcpy / 1e6:5.2f} "
              f"TB/s  elementwise {kernel:7.3f} us  forward {fwd:7.3f} us "
              f"{moved / fwd / 1e6:5.2f} TB/s  fwd/memcpy {fwd / memcpy:5.3f}  "
              f"fwd/elementwise {fwd / kernel:5.3f}", flush=True)
    with open(out_path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
