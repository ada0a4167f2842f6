"""The shipped merge kernels at every call size, not only the benchmark's batches 1/16/64.

For each dtype, head count, grid, pass and batch whose call moves ``--min-mb`` to ``--max-mb``
MB (read + written), the kernel the runtime op chooses is run once on a NaN-poisoned output and
checked bit-exact against the reference, then timed by the profiler (CUPTI kernel time, L2
flushed before every run) beside the memcpy of the kernel's own buffers: the ratio the issue's
target is stated in. Each call is timed at one placement; those above ``--recheck`` are timed
again at ``--placements`` placements alive at once, and that median is what a call is judged
on (a call's ratio moves a few hundredths with where its tensors lie; docs/perf.md v23, v37).

    PSA_TVM_ARTIFACTS=DIR python3 scripts/sweep_batches.py --out sweep.json
        [--dtypes float32 float16] [--heads 2 4 6] [--grids 20x15 37x29 ...]
        [--batches 2 4 8 ...] [--passes forward backward] [--min-mb 8] [--max-mb 300]
        [--limit 1.05] [--recheck 1.04] [--placements 3] [--key-dim 32]

Prints each call as it is timed, then the calls above ``--limit`` by kernel and the worst
ones; ``--out`` keeps every measurement. Needs a CUDA GPU and torch; no TVM.
(docs/perf.md v37: 948 calls in about a minute on an H200.)
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from psa_tvm.config import DTYPE_ITEMSIZE
from psa_tvm.tools.bench import Shape

#: The benchmark's grids and the odd and rectangular ones of issue 11.
GRIDS = ("20x12", "20x15", "20x20", "40x23", "37x29", "40x40", "64x3", "1x33", "30x40")
BATCHES = (2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 72, 80, 96, 128)


@dataclass(frozen=True)
class Call:
    """One call of the merge: a pass of the benchmark's :class:`Shape` at one dtype."""

    pass_: str
    dtype: str
    shape: Shape

    @property
    def rows(self) -> int:
        """``B * nh``: the attention outputs' leading dimension."""
        return self.shape.batch * self.shape.num_heads

    @property
    def mb(self) -> float:
        """MB the call moves, as the benchmark counts them: the merged tensor's bytes read
        once and written once."""
        return 2 * self.shape.merged_bytes(self.dtype) / 1e6

    @property
    def fields(self) -> dict[str, int | str]:
        """The call as structured fields, as the sweep's JSON records them beside the label."""
        shape = self.shape
        return {"pass": self.pass_, "dtype": self.dtype, "key_dim": shape.key_dim,
                "num_heads": shape.num_heads, "grid": f"{shape.height}x{shape.width}",
                "n": shape.n, "rows": self.rows}

    @property
    def label(self) -> str:
        shape = self.shape
        return (f"{self.pass_[:3]} {self.dtype} nh{shape.num_heads} {shape.label} N={shape.n} "
                f"B*nh={self.rows}")


def parse_grid(text: str) -> tuple[int, int]:
    try:
        height, width = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"grid {text!r}: expected HxW, e.g. 20x15") from None
    if height < 1 or width < 1:
        raise argparse.ArgumentTypeError(f"grid {text!r}: H and W must be positive")
    return height, width


def calls(dtypes, heads, grids, passes, batches, min_mb: float, max_mb: float,
          key_dim: int = 32) -> list[Call]:
    """Every call of the sweep, in a fixed order, whose size is within ``[min_mb, max_mb]``."""
    found = []
    for dtype in dtypes:
        for num_heads in heads:
            for height, width in grids:
                for pass_ in passes:
                    for batch in batches:
                        shape = Shape(f"{batch}x{height}x{width}", batch, num_heads, key_dim,
                                      height, width)
                        call = Call(pass_, dtype, shape)
                        if min_mb <= call.mb <= max_mb:
                            found.append(call)
    return found


def summary(results: list[dict], limit: float, worst: int = 20) -> str:
    """The calls above ``limit`` by kernel and the ``worst`` ones, as text."""
    over = [r for r in results if r["ratio"] > limit]
    lines = [f"{len(over)} of {len(results)} calls above {limit}x the copy; "
             f"{sum(not r['exact'] for r in results)} not bit-exact"]
    for kernel, count in collections.Counter(r["kernel"] for r in over).most_common():
        lines.append(f"  {count:4d}  {kernel}")
    for r in sorted(over, key=lambda r: -r["ratio"])[:worst]:
        lines.append(f"  {r['ratio']:6.3f}  {r['mb']:7.1f} MB  {r['call']}  {r['kernel']}")
    return "\n".join(lines)


class _Runner:
    """Runs and times calls on the GPU (imports torch and the run time only when used)."""

    def __init__(self, artifacts: str | None) -> None:
        import torch

        from psa_tvm.tools.timing import GpuTimer, KernelProfiler

        self.torch = torch
        self.artifacts = artifacts
        self.prof = KernelProfiler(GpuTimer(reps=5), reps=12)
        self.gen = torch.Generator(device="cuda").manual_seed(0)
        self.stream = torch.cuda.current_stream().cuda_stream
        self.ops: dict = {}

    def _op(self, call: Call):
        from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp

        key = (call.shape.key_dim, call.shape.num_heads, call.dtype)
        if key not in self.ops:
            self.ops[key] = PsaMergeAttnRuntimeOp(*key, schedule="tiled",
                                                  artifacts=self.artifacts)
        return self.ops[key]

    def run(self, call: Call, placements: int) -> dict:
        from psa_tvm import reference
        from psa_tvm.tools.timing import flat_copy, merge_halves

        torch, op, shape = self.torch, self._op(call), call.shape
        dtype, hw = getattr(torch, call.dtype), (shape.height, shape.width)
        ratios, exact, kernel, alive = [], True, "", []
        for _ in range(placements):
            halves = merge_halves(call.rows, shape.n, shape.key_dim, dtype, self.gen)
            lo, hi = halves[0], halves[1]
            merged = torch.empty(shape.batch, 2 * shape.num_heads * shape.key_dim, *hw,
                                 device="cuda", dtype=dtype)
            alive.append((halves, merged))  # every placement's tensors lie elsewhere
            if call.pass_ == "forward":
                want = reference.merge(lo, hi, shape.num_heads, *hw)
                launch = functools.partial(op.launch_forward, lo, hi, merged, self.stream, hw)
                kernel = op.plan_forward([lo, hi], merged, hw).kernel.entry
                written, src, dst = merged, halves, merged
            else:
                merged.copy_(torch.randn(merged.shape, device="cuda", dtype=dtype,
                                         generator=self.gen))
                want = torch.stack(reference.merge_backward(merged, shape.num_heads,
                                                            shape.key_dim))
                launch = functools.partial(op.launch_backward, merged, lo, hi, self.stream)
                kernel = op.plan_backward(merged, [lo, hi]).kernel.entry
                written, src, dst = halves, merged, halves
            written.fill_(float("nan"))
            launch()
            torch.cuda.synchronize()
            exact = exact and reference.same_bits(written, want)
            copy_us = self.prof.median_us(flat_copy(src, dst))
            kernel_us = self.prof.median_us(launch)
            ratios.append(kernel_us / copy_us if kernel_us and copy_us else float("nan"))
        # The fields beside the label let readers (v43's caps.py) group calls without parsing
        # it; the label alone lacks key_dim.
        return {"call": call.label, **call.fields, "mb": round(call.mb, 2), "kernel": kernel,
                "exact": exact, "placements": placements,
                "ratio": round(statistics.median(ratios), 4),
                "ratios": [round(r, 4) for r in ratios]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON of every measurement")
    parser.add_argument("--artifacts", help="artifact directory (default: the run time's)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"],
                        choices=sorted(DTYPE_ITEMSIZE))
    parser.add_argument("--heads", nargs="+", type=int, default=[2, 4, 6])
    parser.add_argument("--grids", nargs="+", type=parse_grid,
                        default=[parse_grid(g) for g in GRIDS])
    parser.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    parser.add_argument("--passes", nargs="+", default=["forward", "backward"],
                        choices=["forward", "backward"])
    parser.add_argument("--key-dim", type=int, default=32)
    parser.add_argument("--min-mb", type=float, default=8.0)
    parser.add_argument("--max-mb", type=float, default=300.0)
    parser.add_argument("--limit", type=float, default=1.05)
    parser.add_argument("--recheck", type=float, default=1.04,
                        help="calls above this at one placement are timed again at several")
    parser.add_argument("--placements", type=int, default=3)
    args = parser.parse_args(argv)
    if any(h < 1 for h in args.heads) or any(b < 1 for b in args.batches):
        parser.error("--heads and --batches: expected positive integers")
    if args.placements < 1 or args.min_mb > args.max_mb:
        parser.error("--placements must be positive and --min-mb at most --max-mb")
    todo = calls(args.dtypes, args.heads, args.grids, args.passes, args.batches,
                 args.min_mb, args.max_mb, args.key_dim)
    if not todo:
        parser.error("no call of the sweep moves --min-mb to --max-mb MB")
    runner = _Runner(args.artifacts)
    started, results = time.time(), []
    print(f"{len(todo)} calls", flush=True)
    for call in todo:
        row = runner.run(call, 1)
        if row["ratio"] > args.recheck and args.placements > 1:
            row = runner.run(call, args.placements)
        results.append(row)
        print(f"{row['call']:52s} {row['mb']:7.1f} {row['ratio']:6.3f} "
              f"{row['kernel']}{'' if row['exact'] else '  NOT EXACT'}", flush=True)
        if len(results) % 50 == 0 or len(results) == len(todo):  # a cut-short run keeps most
            args.out.write_text(json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "calls": results},
                indent=1))
    print(f"{time.time() - started:.0f} s\n" + summary(results, args.limit), flush=True)
    return 0 if all(r["exact"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
