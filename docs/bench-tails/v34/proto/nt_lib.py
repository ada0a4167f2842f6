"""The aligned-line forward with non-temporal line stores (LLVM IR edited after TVM's codegen)
against the shipped forwards (generic, prefetch, lines) and torch's ``copy_``, one process,
per-round ratios (docs/perf.md v34).

    python docs/bench-tails/v34/proto/nt_lib.py build DIR [--chunks 1024]   # with TVM
    python docs/bench-tails/v34/proto/nt_lib.py run DIR [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
import time
from pathlib import Path

SHAPES = ["40x40/b16", "40x23/b16", "37x29/b16", "20x15/b16", "40x40/b64", "37x29/b64"]


def nontemporal(ll: str) -> tuple[str, int]:
    """Mark every store of a vpermi2var result (the aligned lines) non-temporal, align 64."""
    joined = set(re.findall(r"^\s*(%[\w.]+) = (?:tail )?call <\d+ x i\d+> "
                            r"@llvm\.x86\.avx512\.vpermi2var", ll, re.M))
    count = 0

    def mark(match: re.Match) -> str:
        nonlocal count
        if match.group(2) not in joined:
            return match.group(0)
        count += 1
        return (f"{match.group(1)}{match.group(2)}, ptr {match.group(3)}, align 64, "
                "!nontemporal !9999")

    ll = re.sub(r"^(\s*store <\d+ x i\d+> )(%[\w.]+), ptr (%[\w.]+), align \d+", mark, ll,
                flags=re.M)
    return ll + "\n!9999 = !{i32 1}\n", count


def build(out_dir: Path, chunks: list[int], dtypes: list[str]) -> None:
    import tvm

    from psa_tvm.compiler.cpu import POOL_SOURCE, SHUFFLE, cpu_target, lines_target
    from psa_tvm.compiler.rules.cpu_lines import CpuLines
    from psa_tvm.config import OpConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    rule = CpuLines()
    for dtype in dtypes:
        config = OpConfig(32, 4, dtype)
        default = SHUFFLE.default_params(config)
        main_funcs = {
            "generic": SHUFFLE.build("forward", config, default, name="generic"),
            "prefetch": SHUFFLE.build("forward", config,
                                      dataclasses.replace(default, prefetch=True),
                                      name="prefetch")}
        ldef = rule.default_params(config)
        lines = {"lines": rule.build(config, ldef, name="lines")}
        nt = {"lines_nt": rule.build(config, ldef, name="lines_nt")}
        for chunk in chunks:
            nt[f"lines_nt_{chunk}"] = rule.build(config, dataclasses.replace(ldef, chunk=chunk),
                                                 name=f"lines_nt_{chunk}")
        main = tvm.compile(tvm.IRModule(main_funcs), target=cpu_target())
        v4 = tvm.compile(tvm.IRModule(lines), target=lines_target())
        ntmod = tvm.compile(tvm.IRModule(nt), target=lines_target())
        ll, count = nontemporal(ntmod.mod.inspect_source("ll"))
        path = out_dir / f"nt_{dtype}.ll"
        path.write_text(ll)
        loaded = tvm.runtime.load_module(str(path))
        print(dtype, "non-temporal stores:", count)
        main.mod.import_module(v4.mod)
        main.mod.import_module(loaded)
        main.export_library(str(out_dir / f"nt_{dtype}.so"), addons=[str(POOL_SOURCE)],
                            options=["-O2", "-pthread", "-ldl"])
        print("built", out_dir / f"nt_{dtype}.so")


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


def cell(values: list[float]) -> str:
    """Median (p25-p75) of per-round ratios."""
    q = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):.2f} ({q[0]:.2f}-{q[2]:.2f})"


def case(shape: str, dtype):
    """``lo``, ``hi``, the merged reference (``[B, nh, 2, kd, N]``), ``N`` and the integer dtype
    the results are compared in, for ``shape`` = ``HxW/bB`` at nh 4, kd 32."""
    import torch

    grid, batch_text = shape.split("/b")
    height, width = map(int, grid.split("x"))
    batch, nh, kd, n = int(batch_text), 4, 32, height * width
    lo = torch.randn(batch * nh, n, kd).to(dtype)
    hi = torch.randn(batch * nh, n, kd).to(dtype)
    ref = torch.stack([lo.view(batch, nh, n, kd), hi.view(batch, nh, n, kd)], 2)
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    return lo, hi, ref.transpose(-1, -2).contiguous(), n, bits


def check_forward(fn, lo, hi, ref, out5, n: int, bits, where) -> None:
    """``fn`` writes ``ref`` bit-exactly over a NaN-poisoned ``out5``."""
    import torch

    out5.fill_(float("nan"))
    fn(lo, hi, out5, n)
    assert torch.equal(out5.view(bits), ref.view(bits)), where


def check_backward(fn, ref, lo, hi, d_lo, d_hi, n: int, bits, where) -> None:
    """``fn`` writes ``lo`` and ``hi`` bit-exactly over NaN-poisoned ``d_lo`` and ``d_hi``."""
    import torch

    d_lo.fill_(float("nan"))
    d_hi.fill_(float("nan"))
    fn(ref, d_lo, d_hi, n)
    assert torch.equal(d_lo.view(bits), lo.view(bits)), where
    assert torch.equal(d_hi.view(bits), hi.view(bits)), where


def interleaved(calls: dict, nbytes_of, rounds: int) -> tuple[dict, list]:
    """Per-round time ratios of each of ``calls`` (name -> no-argument callable) to torch's
    ``copy_`` of the same bytes (``nbytes_of``: a tensor of that size), in rotated order."""
    import torch

    src = nbytes_of.reshape(-1).clone()
    dst = torch.empty_like(src)
    names = list(calls)
    ratios: dict = {name: [] for name in names}
    copies = []
    for r in range(rounds):
        copy = batch_s(lambda: dst.copy_(src))
        copies.append(copy)
        for name in names[r % len(names):] + names[:r % len(names)]:
            ratios[name].append(batch_s(calls[name]) / copy)
    return ratios, copies


def run(lib_dir: Path, threads: int, rounds: int, shapes: list[str], dtypes: list[str]) -> None:
    import torch
    import tvm_ffi

    from psa_tvm.runtime import cpu_pool

    torch.set_num_threads(threads)
    print(f"threads {threads}, rounds {rounds}; median per-round time / copy_ (p25-p75)")
    header = None
    for dtype_name in dtypes:
        path = lib_dir / f"nt_{dtype_name}.so"
        module = tvm_ffi.load_module(str(path))
        module["psa_tvm_own_pool"]()
        cpu_pool.share_torch_threads(path)
        names = ["generic", "prefetch", "lines", "lines_nt"]
        for chunk in (512, 1024, 2048, 1 << 20):
            try:
                module[f"lines_nt_{chunk}"]
            except Exception:
                continue
            names.append(f"lines_nt_{chunk}")
        fns = {name: module[name] for name in names}
        dtype = getattr(torch, dtype_name)
        for shape in shapes:
            lo, hi, ref, n, bits = case(shape, dtype)
            out5 = torch.empty_like(ref)
            assert out5.data_ptr() % 64 == 0
            for name, fn in fns.items():
                check_forward(fn, lo, hi, ref, out5, n, bits, (name, shape))
            if header is None:
                header = (f"{'dtype':9s} {'shape':10s} {'MB':>6s} {'copy us':>8s}  "
                          + "  ".join(f"{name:>16s}" for name in names))
                print(header)
            ratios, copies = interleaved(
                {name: lambda f=fns[name], a=(lo, hi, out5, n): f(*a) for name in names}, ref,
                rounds)
            print(f"{dtype_name:9s} {shape:10s} {2 * ref.numel() * ref.element_size() / 1e6:6.2f} "
                  f"{statistics.median(copies) * 1e6:8.1f}  "
                  + "  ".join(f"{cell(ratios[name]):>16s}" for name in names), flush=True)

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["build", "run"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", nargs="+", default=SHAPES)
    parser.add_argument("--chunks", nargs="+", type=int, default=[])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16", "float32"])
    args = parser.parse_args()
    if args.mode == "build":
        build(args.dir, args.chunks, args.dtypes)
    else:
        run(args.dir, args.threads, args.rounds, args.shapes, args.dtypes)


if __name__ == "__main__":
    sys.exit(main())
