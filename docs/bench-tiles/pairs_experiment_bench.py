"""The 4-byte-pair N side (pairs_experiment.cu) against the tuned TVM build in the same process:
profiler kernel time (L2 flushed) / copy time of the same bytes, exactness against
psa_tvm.reference (bit-compared, outputs poisoned first). Needs CuPy. docs/perf.md, v12.

    nvcc -cubin -arch=sm_90 -O3 -std=c++17 pairs_experiment.cu -o pairs.cubin
    python3 pairs_experiment_bench.py ARTIFACTS CUBIN OUT.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cupy as cp
import torch

sys.path.insert(0, str(Path(__file__).parent))
from regtile_experiment_bench import check_and_time, launcher

from psa_tvm import PsaMergeAttnRuntimeOp, reference
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

KD = 32
CONFIGS = ((64, 128), (64, 256), (128, 128), (128, 256))  # (tile positions, threads)
# (B, nh, H, W): odd N first, then even N that the tails table misses, then aligned squares
SHAPES = [(16, 4, 37, 29), (64, 4, 37, 29), (64, 4, 1, 33), (64, 4, 20, 15), (16, 4, 40, 23),
          (64, 4, 40, 23), (64, 6, 20, 12), (16, 4, 40, 40), (64, 4, 40, 40), (64, 4, 20, 20)]


def one_shape(module, prof, tuned, stream, stream_ptr, dtype, batch, nh, h, w) -> dict:
    n = h * w
    lo = torch.randn(batch * nh, n, KD, device="cuda", dtype=dtype) + 3
    hi = torch.randn_like(lo) - 3
    out = torch.empty(batch, 2 * nh * KD, h, w, device="cuda", dtype=dtype)
    grad = torch.randn_like(out) + 3
    dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
    src, dst = torch.cat([lo.view(-1), hi.view(-1)]), torch.empty_like(out).view(-1)
    want = reference.merge(lo, hi, nh, h, w)
    want_lo, want_hi = reference.merge_backward(grad, nh, KD)
    copy = prof.median_us(lambda: dst.copy_(src))
    row = {"dtype": str(dtype).removeprefix("torch."), "shape": [batch, nh, h, w], "n": n,
           "mb": 2 * out.numel() * out.element_size() / 1e6, "copy": copy, "tvm": {
               "fwd": prof.median_us(lambda: tuned.launch_forward(lo, hi, out, stream_ptr, (h, w))),
               "bwd": prof.median_us(lambda: tuned.launch_backward(grad, dlo, dhi, stream_ptr))}}
    for tile, threads in CONFIGS:
        fwd = launcher(module.get_function(f"fwd_pairs_{tile}_{threads}"),
                       ((n + tile - 1) // tile, batch * nh * 2, 1), threads,
                       (lo.data_ptr(), hi.data_ptr(), out.data_ptr()), n, stream)
        bwd = launcher(module.get_function(f"bwd_pairs_{tile}_{threads}"),
                       ((n + tile - 1) // tile, batch * nh * 2, 1), threads,
                       (grad.data_ptr(), dlo.data_ptr(), dhi.data_ptr()), n, stream)
        row[f"pairs_{tile}_{threads}"] = check_and_time(prof, fwd, bwd, out, dlo, dhi, want,
                                                        want_lo, want_hi, torch.int16)
    return row


def main(artifacts: str, cubin: str, out_path: str) -> None:
    module = cp.RawModule(path=cubin)
    prof = KernelProfiler(GpuTimer(reps=5), reps=15)
    stream_ptr = torch.cuda.current_stream().cuda_stream
    stream = cp.cuda.ExternalStream(stream_ptr)
    ops: dict = {}
    print(f"{'dtype':9} {'shape':16} {'N':>5} {'MB':>6} {'copy us':>7} {'tvm f/b':>11} "
          f"{'best pairs f/b':>14} {'(fwd cfg, bwd cfg)':>20} exact")
    with open(out_path, "w") as sink:
        for dtype in (torch.float16, torch.bfloat16):
            for batch, nh, h, w in SHAPES:
                name = str(dtype).removeprefix("torch.")
                if (nh, name) not in ops:
                    ops[nh, name] = PsaMergeAttnRuntimeOp(KD, nh, name, artifacts=artifacts,
                                                          arch="sm_90")
                row = one_shape(module, prof, ops[nh, name], stream, stream_ptr, dtype, batch,
                                nh, h, w)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                cands = {k: v for k, v in row.items() if k.startswith("pairs")}
                bf = min(cands, key=lambda k: cands[k]["fwd"])
                bb = min(cands, key=lambda k: cands[k]["bwd"])
                c, t = row["copy"], row["tvm"]
                exact = all(v["exact"] for v in cands.values())
                print(f"{row['dtype']:9} {row['shape']!s:16} {row['n']:5d} {row['mb']:6.1f} "
                      f"{c:7.2f} {t['fwd'] / c:5.2f}/{t['bwd'] / c:5.2f} "
                      f"{cands[bf]['fwd'] / c:6.2f}/{cands[bb]['bwd'] / c:5.2f} "
                      f"({bf[6:]:>8}, {bb[6:]:>8}) {exact}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
