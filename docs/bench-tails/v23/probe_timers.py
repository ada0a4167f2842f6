"""Why the tuner and the benchmark disagree at 10-13 MB (docs/perf.md v23, section 1).

The same kernel at the same shape reads 0.94-0.96x a copy in ``psa-tvm tune run --profiler``
and 1.07x in ``psa-tvm bench`` (nh 2 float16 64x20x20); the copy is 5.0-5.1 us in the one and
4.75-4.8 us in the other, the kernel 4.9 and 5.1 us. Only L2-sized shapes differ (64x40x40
agrees to 1%). This probe times one shape's copy and kernel under each difference between the
two: the bench's and the tuner's own functions, then one setup with the flush and the idle
time before each run varied, copy and kernel alternated.

    PYTHONPATH=. python3 docs/bench-tails/v23/probe_timers.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools import bench, tune
from psa_tvm.tools.timing import SPIN_CYCLES, GpuTimer, KernelProfiler

CASES = [  # (num_heads, dtype, batch, height, width)
    (2, "float16", 64, 20, 20),
    (2, "float16", 16, 40, 40),
    (6, "bfloat16", 16, 20, 20),
    (6, "float16", 16, 20, 20),
    (2, "float16", 64, 40, 40),
]


class VariedProfiler(KernelProfiler):
    """The kernel profiler with another flush and idle time before each run."""

    def __init__(self, timer: GpuTimer, flush: str, spin: int, reps: int = 20) -> None:
        super().__init__(timer, reps)
        self.flush, self.spin = flush, spin

    def _prologue(self) -> None:
        if self.flush == "zero":  # the library's: leaves 60 MB of dirty lines in L2
            self.timer._flush.zero_()
        elif self.flush == "read":  # leaves clean lines
            self.timer._flush.sum()
        elif self.flush == "zero+read":  # dirty lines written back, then clean ones
            self.timer._flush.zero_()
            self.timer._flush.sum()
        torch.cuda._sleep(self.spin)


def time_varied(timer: GpuTimer, op: PsaMergeAttnRuntimeOp, case: str, dtype_name: str,
                batch: int, nh: int, height: int, width: int) -> list[dict]:
    dtype = getattr(torch, dtype_name)
    lo = torch.randn(batch * nh, height * width, 32, device="cuda", dtype=dtype) + 3
    hi = torch.randn_like(lo) - 3
    merged = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
    src, dst = torch.cat([lo.view(-1), hi.view(-1)]), torch.empty_like(merged).view(-1)
    stream = torch.cuda.current_stream().cuda_stream
    fns = {"copy": lambda: dst.copy_(src),
           "kernel": lambda: op.launch_forward(lo, hi, merged, stream, (height, width))}
    rows = []
    for flush in ("zero", "read", "zero+read", "none"):
        for spin in (SPIN_CYCLES // 10, SPIN_CYCLES * 10):
            varied = VariedProfiler(timer, flush, spin)
            times: dict[str, list[float]] = {name: [] for name in fns}
            for _ in range(2):
                for name, fn in fns.items():
                    times[name].append(varied.median_us(fn))
            rows.append({"case": case, "how": f"flush={flush} spin={spin}",
                         "copy": statistics.median(times["copy"]),
                         "kernel": statistics.median(times["kernel"]), "all": times})
    return rows


def main() -> None:
    out = sys.argv[1]
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    rows = []
    for nh, dtype_name, batch, height, width in CASES:
        shape = bench.Shape(f"{batch}x{height}x{width}/nh{nh}", batch, nh, 32, height, width)
        case = f"nh{nh} {dtype_name} {batch}x{height}x{width}"
        # 1. the bench's own function
        recs = bench.time_shape(timer, shape, dtype_name, ["tiled"], ".artifacts", None,
                                peers=("copy",), profiler=prof)
        fwd = {r["impl"]: r for r in recs if r["pass"] == "forward"}
        rows.append({"case": case, "how": "bench.time_shape", "copy": fwd["copy"]["prof_us"],
                     "kernel": fwd["tiled"]["prof_us"]})
        # 2. the tuner's own function, with the build the bench ran
        op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=".artifacts")
        build = op.builds["forward"]
        rec = tune.time_candidate(prof, build, "forward", (batch, height, width), {})
        rows.append({"case": case, "how": "tune.time_candidate", "copy": rec["copy_us"],
                     "kernel": rec["us"]})
        # 3. one setup (the bench's tensors), flush and idle varied, copy and kernel alternated
        rows += time_varied(timer, op, case, dtype_name, batch, nh, height, width)
    for r in rows:
        r["ratio"] = round(r["kernel"] / r["copy"], 4)
    with open(out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print(f"{'case':28s} {'how':32s} {'copy':>7s} {'kernel':>7s} {'ratio':>6s}")
    for r in rows:
        print(f"{r['case']:28s} {r['how']:32s} {r['copy']:7.3f} {r['kernel']:7.3f} "
              f"{r['ratio']:6.3f}")


if __name__ == "__main__":
    main()
