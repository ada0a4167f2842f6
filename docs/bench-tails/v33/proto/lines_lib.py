"""The aligned-line 16-bit forward (``cpu_lines``) against the shipped ``cpu_shuffle`` forward
and torch's ``copy_``, one process, per-round ratios (docs/perf.md v33).

    python docs/bench-tails/v33/proto/lines_lib.py build DIR [--chunks 128 384]  # with TVM
    python docs/bench-tails/v33/proto/lines_lib.py run DIR [--threads 16] [--rounds 21]

Each library (DIR/lines_<dtype>.so) holds both forwards of kd 32, nh 4 (the generic one for
x86-64-v3 as shipped, the line kernel for x86-64-v4: ``lines`` at the default chunk, ``lines_C``
at each other chunk ``C`` asked for) and cpu_pool.cc; the regions run on torch's OpenMP
threads, as in the library. Results are checked bit-exact first.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

SHAPES = ["20x20/b16", "40x40/b16", "20x15/b16", "20x12/b16", "40x23/b16", "37x29/b16",
          "40x23/b1", "37x29/b1", "20x15/b64", "37x29/b64"]


def build(out_dir: Path, chunks: list[int], dtypes: list[str]) -> None:
    import tvm

    from psa_tvm.compiler.cpu import POOL_SOURCE, SHUFFLE, cpu_target
    from psa_tvm.compiler.rules.cpu_lines import TARGET_MCPU, CpuLines
    from psa_tvm.config import OpConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    rule = CpuLines()
    for dtype in dtypes:
        config = OpConfig(32, 4, dtype)
        shipped = SHUFFLE.build("forward", config, SHUFFLE.default_params(config), name="shipped")
        default = rule.default_params(config)
        lines = {"lines": rule.build(config, default, name="lines")}
        for chunk in chunks:
            if chunk != default.chunk:
                lines[f"lines_{chunk}"] = rule.build(
                    config, dataclasses.replace(default, chunk=chunk), name=f"lines_{chunk}")
        main = tvm.compile(tvm.IRModule({"shipped": shipped}), target=cpu_target())
        v4 = tvm.compile(tvm.IRModule(lines),
                         target=tvm.target.Target({"kind": "llvm", "mcpu": TARGET_MCPU}))
        main.mod.import_module(v4.mod)
        main.export_library(str(out_dir / f"lines_{dtype}.so"), addons=[str(POOL_SOURCE)],
                            options=["-O2", "-pthread", "-ldl"])
        print("built", out_dir / f"lines_{dtype}.so")


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


def run(lib_dir: Path, threads: int, rounds: int, shapes: list[str], dtypes: list[str]) -> None:
    import torch
    import tvm_ffi

    from psa_tvm.runtime import cpu_pool

    torch.set_num_threads(threads)
    print(f"threads {threads}, rounds {rounds}; median per-round time / copy_ (p25-p75)")
    header = None
    for dtype_name in dtypes:
        path = lib_dir / f"lines_{dtype_name}.so"
        module = tvm_ffi.load_module(str(path))
        module["psa_tvm_own_pool"]()
        cpu_pool.share_torch_threads(path)
        names = ["shipped", "lines", *(f"lines_{c}" for c in chunks_in(module))]
        fns = {name: module[name] for name in names}
        dtype = getattr(torch, dtype_name)
        for shape in shapes:
            grid, batch_text = shape.split("/b")
            height, width = map(int, grid.split("x"))
            batch, nh, kd, n = int(batch_text), 4, 32, height * width
            bits = torch.int32 if dtype == torch.float32 else torch.int16
            lo = torch.randn(batch * nh, n, kd).to(dtype)
            hi = torch.randn(batch * nh, n, kd).to(dtype)
            ref = torch.stack([lo.view(batch, nh, n, kd), hi.view(batch, nh, n, kd)], 2)
            ref = ref.transpose(-1, -2).contiguous()
            out5 = torch.empty_like(ref)
            src, dst = ref.reshape(-1).clone(), torch.empty(ref.numel(), dtype=dtype)
            for name, fn in fns.items():
                out5.fill_(float("nan"))
                fn(lo, hi, out5, n)
                assert torch.equal(out5.view(bits), ref.view(bits)), (name, shape)
            ratios = {name: [] for name in fns}
            copies = []
            if header is None:
                header = (f"{'dtype':9s} {'shape':10s} {'MB':>6s} {'copy us':>8s}  "
                          + "  ".join(f"{name:>16s}" for name in names))
                print(header)
            for r in range(rounds):
                copy = batch_s(lambda d=dst, s=src: d.copy_(s))
                copies.append(copy)
                for name in names[r % len(names):] + names[:r % len(names)]:
                    ratios[name].append(
                        batch_s(lambda f=fns[name], a=(lo, hi, out5, n): f(*a)) / copy)

            def cell(values):
                q = statistics.quantiles(values, n=4)
                return f"{statistics.median(values):.2f} ({q[0]:.2f}-{q[2]:.2f})"

            print(f"{dtype_name:9s} {shape:10s} {ref.numel() * ref.element_size() / 1e6:6.2f} "
                  f"{statistics.median(copies) * 1e6:8.1f}  "
                  + "  ".join(f"{cell(ratios[name]):>16s}" for name in names), flush=True)


def chunks_in(module) -> list[int]:
    """The other chunks built into ``module`` (``lines_C`` functions)."""
    found = []
    for chunk in (64, 96, 128, 160, 192, 224, 288, 320, 352, 384, 448, 512, 768, 1024, 1 << 20):
        try:
            module[f"lines_{chunk}"]
        except (AttributeError, KeyError, RuntimeError, ValueError):
            continue
        found.append(chunk)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["build", "run"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--shapes", nargs="+", default=SHAPES)
    parser.add_argument("--chunks", nargs="+", type=int, default=[])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    args = parser.parse_args()
    if args.mode == "build":
        build(args.dir, args.chunks, args.dtypes)
    else:
        run(args.dir, args.threads, args.rounds, args.shapes, args.dtypes)


if __name__ == "__main__":
    sys.exit(main())
