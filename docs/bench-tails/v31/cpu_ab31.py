"""CPU libraries of several artifact directories against torch's ``copy_``, one process, ratios
taken per round (docs/perf.md v31).

    python docs/bench-tails/v31/cpu_ab31.py --dirs ART_A ART_B [--threads 2] [--rounds 21]

Each round times ``copy_`` and then every directory's forward and backward (a batch of calls
of about 3 ms each, the order rotating from round to round) and divides each kernel's time by
that round's copy. The median of those ratios is printed. On a shared host the memory
bandwidth moves within seconds (this 2-core guest: ``copy_`` of the same 17.6 MB 139 to 650
us within minutes); a ratio taken within one round cancels most of that, best-of times taken
in different rounds do not. Every kernel's result is checked bit-exact first.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime.cpu import cpu_kernels

SHAPES = ["20x20/b1", "20x20/b16", "40x40/b1", "40x40/b16", "20x15/b16", "20x12/b16",
          "40x23/b1", "40x23/b16", "37x29/b1", "37x29/b16", "1x33/b16", "64x3/b16"]


def batch_s(fn, target_s: float = 0.003) -> float:
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    calls = max(1, int(target_s / max(once, 1e-7)))
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def time_shape(dirs: list[Path], dtype_name: str, shape: str, rounds: int) -> str:
    """One line: the median per-round ratio of each directory's forward and backward."""
    dtype = getattr(torch, dtype_name)
    grid, batch_text = shape.split("/b")
    height, width = map(int, grid.split("x"))
    batch, nh, kd, n = int(batch_text), 4, 32, height * width
    lo = (torch.randn(batch * nh, n, kd) + 3).to(dtype)
    hi = (torch.randn(batch * nh, n, kd) - 3).to(dtype)
    grad = reference.merge(lo, hi, nh, height, width)
    src, dst = grad.reshape(-1).clone(), torch.empty(grad.numel(), dtype=dtype)
    out, d_lo, d_hi = torch.empty_like(grad), torch.empty_like(lo), torch.empty_like(hi)
    out5, grad5 = out.view(batch, nh, 2, kd, n), grad.view(batch, nh, 2, kd, n)
    fns = {}
    for i, root in enumerate(dirs):
        kernels = cpu_kernels(OpConfig(kd, nh, dtype_name), root)
        out.fill_(7)
        kernels.forward(lo, hi, out5, n)
        d_lo.fill_(7)
        d_hi.fill_(7)
        kernels.backward(grad5, d_lo, d_hi, n)
        assert torch.equal(out, grad) and torch.equal(d_lo, lo) and torch.equal(d_hi, hi), root
        fns[f"f{i}"] = lambda k=kernels: k.forward(lo, hi, out5, n)
        fns[f"b{i}"] = lambda k=kernels: k.backward(grad5, d_lo, d_hi, n)
    names = list(fns)
    ratios: dict[str, list[float]] = {name: [] for name in names}
    copies = []
    for r in range(rounds):
        copy = batch_s(lambda: dst.copy_(src))
        copies.append(copy)
        for name in names[r % len(names):] + names[:r % len(names)]:
            ratios[name].append(batch_s(fns[name]) / copy)
    med = {name: statistics.median(v) for name, v in ratios.items()}
    return (f"{dtype_name:8s} {shape:10s} {grad.numel() * grad.element_size() / 1e6:6.2f} "
            f"MB a side  copy {statistics.median(copies) * 1e6:7.1f} us  fwd "
            + " ".join(f"{med[f'f{i}']:.2f}" for i in range(len(dirs))) + "  bwd "
            + " ".join(f"{med[f'b{i}']:.2f}" for i in range(len(dirs))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dirs", nargs="+", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--shapes", nargs="+", default=SHAPES)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, rounds {args.rounds}; columns: "
          + " ".join(str(d) for d in args.dirs), flush=True)
    for dtype_name in args.dtypes:
        for shape in args.shapes:
            print(time_shape(args.dirs, dtype_name, shape, args.rounds), flush=True)


if __name__ == "__main__":
    main()
