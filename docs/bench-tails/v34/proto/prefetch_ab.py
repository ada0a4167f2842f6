"""The generic CPU kernels against their slice-prefetching twins, both passes, one process,
per-round ratios to torch's ``copy_`` (docs/perf.md v34): where should the prefetch start?

    python docs/bench-tails/v34/proto/prefetch_ab.py build DIR          # with TVM
    python docs/bench-tails/v34/proto/prefetch_ab.py run DIR [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nt_lib import case, cell, check_backward, check_forward, interleaved

SHAPES = ["64x3/b16", "20x12/b16", "20x15/b16", "20x20/b16", "40x23/b16", "37x29/b16",
          "40x40/b16"]


def build(out_dir: Path, dtypes: list[str]) -> None:
    import tvm

    from psa_tvm.compiler.cpu import POOL_SOURCE, SHUFFLE, cpu_target
    from psa_tvm.config import OpConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    for dtype in dtypes:
        config = OpConfig(32, 4, dtype)
        default = SHUFFLE.default_params(config)
        prefetching = dataclasses.replace(default, prefetch=True)
        funcs = {f"{pass_}_{kind}": SHUFFLE.build(pass_, config, params, name=f"{pass_}_{kind}")
                 for pass_ in ("forward", "backward")
                 for kind, params in (("generic", default), ("prefetch", prefetching))}
        main = tvm.compile(tvm.IRModule(funcs), target=cpu_target())
        main.export_library(str(out_dir / f"pf_{dtype}.so"), addons=[str(POOL_SOURCE)],
                            options=["-O2", "-pthread", "-ldl"])
        print("built", out_dir / f"pf_{dtype}.so")


def run(lib_dir: Path, threads: int, rounds: int, shapes: list[str], dtypes: list[str]) -> None:
    import torch
    import tvm_ffi

    from psa_tvm.runtime import cpu_pool

    torch.set_num_threads(threads)
    print(f"threads {threads}, rounds {rounds}; median per-round time / copy_ (p25-p75)")
    print(f"{'dtype':9s} {'pass':8s} {'shape':10s} {'merged MB':>9s} {'copy us':>8s}  "
          f"{'generic':>16s}  {'prefetch':>16s}")
    for dtype_name in dtypes:
        path = lib_dir / f"pf_{dtype_name}.so"
        module = tvm_ffi.load_module(str(path))
        module["psa_tvm_own_pool"]()
        cpu_pool.share_torch_threads(path)
        dtype = getattr(torch, dtype_name)
        for shape in shapes:
            lo, hi, ref, n, bits = case(shape, dtype)
            out5 = torch.empty_like(ref)
            d_lo, d_hi = torch.empty_like(lo), torch.empty_like(hi)
            for kind in ("generic", "prefetch"):
                check_forward(module[f"forward_{kind}"], lo, hi, ref, out5, n, bits, (kind, shape))
                check_backward(module[f"backward_{kind}"], ref, lo, hi, d_lo, d_hi, n, bits,
                               (kind, shape))
            for pass_, args in (("forward", (lo, hi, out5, n)), ("backward", (ref, d_lo, d_hi, n))):
                names = [f"{pass_}_generic", f"{pass_}_prefetch"]
                ratios, copies = interleaved(
                    {name: lambda f=module[name], a=args: f(*a) for name in names}, ref, rounds)
                print(f"{dtype_name:9s} {pass_:8s} {shape:10s} "
                      f"{ref.numel() * ref.element_size() / 2**20:9.2f} "
                      f"{statistics.median(copies) * 1e6:8.1f}  "
                      + "  ".join(f"{cell(ratios[name]):>16s}" for name in names), flush=True)

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["build", "run"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", nargs="+", default=SHAPES)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    if args.mode == "build":
        build(args.dir, args.dtypes)
    else:
        run(args.dir, args.threads, args.rounds, args.shapes, args.dtypes)


if __name__ == "__main__":
    sys.exit(main())
