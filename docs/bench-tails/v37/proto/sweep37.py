"""Sweep (docs/perf.md v37): the shipped kernels at every call size, not only the benchmark's
batches 1/16/64. For each dtype, head count, grid and pass, the batches whose call moves 8 MB
or more (up to 300 MB), profiler kernel time / the memcpy of the kernel's own buffers (probe36's
method), each run checked bit-exact on a NaN-poisoned output first. One placement a case; the
cases above ``RECHECK`` are then timed again at three placements (all alive at once), which is
what a row is judged on. Band variants of gen_band37.py (LIB_DIR) run beside the shipped kernel
where their dtype, head count, ``N`` range and ``B * nh`` range say.

    PYTHONPATH=. python3 docs/bench-tails/v37/proto/sweep37.py ARTIFACTS OUT.json [LIB_DIR]
        [focus]

``focus`` (call 2): only the cases some variant runs at, each at three placements at once.
"""

from __future__ import annotations

import ctypes
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler, flat_copy, merge_halves

GRIDS = [(20, 12), (20, 15), (20, 20), (40, 23), (37, 29), (40, 40), (64, 3), (1, 33),
         (30, 40)]
BATCHES = [2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 72, 80, 96, 128]
DTYPES = ["float32", "float16"]
HEADS = [2, 4, 6]
MIN_MB, MAX_MB = 8.0, 300.0
RECHECK = 1.04
PLACEMENTS = 3
KEY_DIM = 32


def load_variants(lib_dir: str | None) -> tuple[dict, dict]:
    if not lib_dir:
        return {}, {}
    meta = json.loads((Path(lib_dir) / "band37.json").read_text())
    symbols = {}
    for lib_path in sorted(Path(lib_dir).glob("band37_*.so")):
        lib = ctypes.CDLL(str(lib_path))
        for name in Path(f"{lib_path}.txt").read_text().split():
            symbols[name] = getattr(lib, name)
            symbols[name].restype = ctypes.c_int
    return meta, symbols


class Case:
    """One call: its tensors at ``placements`` addresses and the callables that time it."""

    def __init__(self, ops, meta, symbols, pass_, dtype_name, nh, batch, height, width,
                 gen, stream) -> None:
        self.pass_, self.nh, self.batch = pass_, nh, batch
        self.dtype_name, self.height, self.width = dtype_name, height, width
        self.n, self.rows = height * width, batch * nh
        self.op = ops[(nh, dtype_name)]
        self.variants = {
            name: fn for name, fn in symbols.items()
            if meta[name]["pass"] == pass_ and meta[name]["dtype"] == dtype_name
            and meta[name]["num_heads"] == nh
            and meta[name]["min_n"] <= self.n <= meta[name]["max_n"]
            and meta[name]["first_rows"] <= self.rows <= meta[name]["last_rows"]}
        self.gen, self.stream = gen, stream

    @property
    def label(self) -> str:
        return (f"{self.pass_[:3]} {self.dtype_name} nh{self.nh} {self.batch}x{self.height}x"
                f"{self.width} N={self.n} B*nh={self.rows}")

    def mb(self) -> float:
        itemsize = torch.empty((), dtype=getattr(torch, self.dtype_name)).element_size()
        return 2 * 2 * self.rows * self.n * KEY_DIM * itemsize / 1e6

    def run(self, prof: KernelProfiler, placements: int) -> dict:
        dtype = getattr(torch, self.dtype_name)
        ratios: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        entry, alive = None, []
        for _ in range(placements):
            halves = merge_halves(self.rows, self.n, KEY_DIM, dtype, self.gen)
            lo, hi = halves[0], halves[1]
            out = torch.empty(self.batch, 2 * self.nh * KEY_DIM, self.height, self.width,
                              device="cuda", dtype=dtype)
            alive.append((halves, out))
            hw = (self.height, self.width)
            if self.pass_ == "forward":
                want = reference.merge(lo, hi, self.nh, *hw)
                fns = {"shipped": functools.partial(self.op.launch_forward, lo, hi, out,
                                                    self.stream, hw)}
                entry = self.op.plan_forward([lo, hi], out, hw).kernel.entry
                tensors, written, src, dst = (lo, hi, out), out, halves, out
            else:
                out.copy_(torch.randn(out.shape, device="cuda", dtype=dtype,
                                      generator=self.gen))
                want = torch.stack(reference.merge_backward(out, self.nh, KEY_DIM))
                fns = {"shipped": functools.partial(self.op.launch_backward, out, lo, hi,
                                                    self.stream)}
                entry = self.op.plan_backward(out, [lo, hi]).kernel.entry
                tensors, written, src, dst = (out, lo, hi), halves, out, halves
            args = (*(ctypes.c_void_p(t.data_ptr()) for t in tensors),
                    ctypes.c_int(self.rows), ctypes.c_int(self.n), ctypes.c_void_p(self.stream))
            fns.update({name: functools.partial(fn, *args) for name, fn in self.variants.items()})
            for name, fn in fns.items():
                written.fill_(float("nan"))
                rc = fn()
                torch.cuda.synchronize()
                exact[name] = (exact.get(name, True) and rc in (None, 0)
                               and reference.same_bits(written, want))
            copy_us = prof.median_us(flat_copy(src, dst))
            ratios.setdefault("copy us", []).append(copy_us)
            for name, fn in fns.items():
                kernel_us = prof.median_us(fn)
                ratios.setdefault(name, []).append(kernel_us / copy_us if kernel_us
                                                   else float("nan"))
        return {"case": self.label, "mb": round(self.mb(), 2), "placements": placements,
                "entry": entry, "exact": exact,
                "ratio": {k: round(statistics.median(v), 4) for k, v in ratios.items()},
                "ratios": {k: [round(x, 4) for x in v] for k, v in ratios.items()}}


def _dump(out_path: str, results: list[dict], rechecked: list[dict]) -> None:
    with open(out_path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "sweep": results,
                   "recheck": rechecked}, f, indent=1)


def main(root: str, out_path: str, lib_dir: str | None = None, mode: str = "sweep") -> None:
    meta, symbols = load_variants(lib_dir)
    prof = KernelProfiler(GpuTimer(reps=5), reps=12)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    ops = {(nh, d): PsaMergeAttnRuntimeOp(KEY_DIM, nh, d, schedule="tiled", artifacts=root)
           for nh in HEADS for d in DTYPES}
    cases = []
    for dtype_name in DTYPES:
        for nh in HEADS:
            for height, width in GRIDS:
                for pass_ in ("forward", "backward"):
                    for batch in BATCHES:
                        case = Case(ops, meta, symbols, pass_, dtype_name, nh, batch, height,
                                    width, gen, stream)
                        if MIN_MB <= case.mb() <= MAX_MB and (mode != "focus"
                                                               or case.variants):
                            cases.append(case)
    print(f"{len(cases)} cases", flush=True)
    started, results, rechecked = time.time(), [], []
    for case in cases:
        row = case.run(prof, PLACEMENTS if mode == "focus" else 1)
        results.append(row)
        flag = "" if all(row["exact"].values()) else "  NOT EXACT"
        print(f"{row['case']:52s} {row['mb']:7.1f} {row['ratio']['shipped']:6.3f} "
              f"{row['entry'].split('_tiled_')[-1]}"
              + "".join(f" {k[4:]}={v:.3f}" for k, v in row["ratio"].items()
                        if k.startswith("b37_")) + flag, flush=True)
        if len(results) % 25 == 0:
            _dump(out_path, results, rechecked)
    print(f"sweep {time.time() - started:.0f} s", flush=True)
    for case, row in zip(cases, results, strict=True):
        best = min(v for k, v in row["ratio"].items() if k != "copy us")
        if mode != "focus" and (row["ratio"]["shipped"] > RECHECK or best > RECHECK):
            again = case.run(prof, PLACEMENTS)
            rechecked.append(again)
            print(f"RE {again['case']:49s} {again['mb']:7.1f} "
                  f"{again['ratio']['shipped']:6.3f} {again['ratios']['shipped']}"
                  + "".join(f" {k[4:]}={v:.3f}" for k, v in again["ratio"].items()
                            if k.startswith("b37_")), flush=True)
        _dump(out_path, results, rechecked)
    print(f"total {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
