"""The generic CPU backward with every vector store non-temporal (LLVM IR edited after TVM's
codegen; its stores are whole 32-byte halves of ``d_lo``/``d_hi`` position rows, aligned when
the tensors are) against the shipped generic and prefetching backwards and torch's ``copy_``,
one process, per-round ratios (docs/perf.md v34).

    python docs/bench-tails/v34/proto/nt_bwd.py build DIR      # with TVM
    python docs/bench-tails/v34/proto/nt_bwd.py run DIR [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nt_lib import case, cell, check_backward, interleaved

SHAPES = ["20x20/b16", "40x23/b16", "37x29/b16", "40x40/b16", "40x40/b64"]
NAMES = ["generic", "prefetch", "nt", "nt_prefetch"]


def nontemporal_all(ll: str, align: int) -> tuple[str, int]:
    """Every vector store non-temporal at ``align`` bytes."""
    count = 0

    def mark(match: re.Match) -> str:
        nonlocal count
        count += 1
        return f"{match.group(1)}, align {align}, !nontemporal !9999"

    ll = re.sub(r"^(\s*store <\d+ x (?:i\d+|float)> %[\w.]+, ptr %[\w.]+), align \d+", mark,
                ll, flags=re.M)
    return ll + "\n!9999 = !{i32 1}\n", count


def build(out_dir: Path, dtypes: list[str]) -> None:
    import tvm

    from psa_tvm.compiler.cpu import POOL_SOURCE, SHUFFLE, cpu_target
    from psa_tvm.config import OpConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    for dtype in dtypes:
        config = OpConfig(32, 4, dtype)
        default = SHUFFLE.default_params(config)
        prefetching = dataclasses.replace(default, prefetch=True)
        plain = {name: SHUFFLE.build("backward", config, params, name=name)
                 for name, params in (("generic", default), ("prefetch", prefetching))}
        marked = {name: SHUFFLE.build("backward", config, params, name=name)
                  for name, params in (("nt", default), ("nt_prefetch", prefetching))}
        main = tvm.compile(tvm.IRModule(plain), target=cpu_target())
        nt = tvm.compile(tvm.IRModule(marked), target=cpu_target())
        ll, count = nontemporal_all(nt.mod.inspect_source("ll"), 32)
        path = out_dir / f"ntb_{dtype}.ll"
        path.write_text(ll)
        print(dtype, "non-temporal stores:", count)
        main.mod.import_module(tvm.runtime.load_module(str(path)))
        main.export_library(str(out_dir / f"ntb_{dtype}.so"), addons=[str(POOL_SOURCE)],
                            options=["-O2", "-pthread", "-ldl"])
        print("built", out_dir / f"ntb_{dtype}.so")


def run(lib_dir: Path, threads: int, rounds: int, shapes: list[str], dtypes: list[str]) -> None:
    import torch
    import tvm_ffi

    from psa_tvm.runtime import cpu_pool

    torch.set_num_threads(threads)
    print(f"threads {threads}, rounds {rounds}; backward, median per-round time / copy_ (p25-p75)")
    print(f"{'dtype':9s} {'shape':10s} {'MB':>6s} {'copy us':>8s}  "
          + "  ".join(f"{name:>16s}" for name in NAMES))
    for dtype_name in dtypes:
        path = lib_dir / f"ntb_{dtype_name}.so"
        module = tvm_ffi.load_module(str(path))
        module["psa_tvm_own_pool"]()
        cpu_pool.share_torch_threads(path)
        dtype = getattr(torch, dtype_name)
        for shape in shapes:
            lo, hi, ref, n, bits = case(shape, dtype)
            d_lo, d_hi = torch.empty_like(lo), torch.empty_like(hi)
            assert d_lo.data_ptr() % 64 == 0 and d_hi.data_ptr() % 64 == 0
            for name in NAMES:
                check_backward(module[name], ref, lo, hi, d_lo, d_hi, n, bits, (name, shape))
            ratios, copies = interleaved(
                {name: lambda f=module[name], a=(ref, d_lo, d_hi, n): f(*a) for name in NAMES},
                ref, rounds)
            print(f"{dtype_name:9s} {shape:10s} {2 * ref.numel() * ref.element_size() / 1e6:6.1f} "
                  f"{statistics.median(copies) * 1e6:8.1f}  "
                  + "  ".join(f"{cell(ratios[name]):>16s}" for name in NAMES), flush=True)

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
