"""Which threads should run the CPU kernels: ``psa-tvm bench --cpu-only`` once per launcher, in
rounds, and per dtype the worst ratio to ``copy_`` (rows above 1.5x) and the median over the
rows >= 1 MB moved (docs/perf.md, v10 and v11).

    python scripts/cpu_pool_ab.py --artifacts ART [--rounds 3] [--threads 2] [--out DIR]
    python scripts/cpu_pool_ab.py --summarize DIR

``ART``: a ``psa-tvm build --target cpu`` directory (CPU libraries and the native library).
Modes, each a fresh process:

- ``own``: the library's own pool (``PSA_TVM_TORCH_EXT=0 PSA_TVM_TORCH_OPENMP=0``);
- ``gomp``: torch's GNU OpenMP threads without the extension (``PSA_TVM_TORCH_EXT=0``);
- ``ext``: the PyTorch extension (``PSA_TVM_TORCH_EXT=1``: built on first use, cached), its
  ``at::parallel_for`` launcher and its C++ eager lane;
- ``extgomp``: the extension's eager lane with the GNU OpenMP launcher put back after it binds
  (separates the launcher from the host path).

Each run writes ``DIR/MODE_ROUND/bench.{json,md}``. Nothing else should run on the host: on 2
cores one busy core stalls a 2-thread region, whatever the launcher.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MODES = {"own": {"PSA_TVM_TORCH_EXT": "0", "PSA_TVM_TORCH_OPENMP": "0"},
         "gomp": {"PSA_TVM_TORCH_EXT": "0", "PSA_TVM_TORCH_OPENMP": "1"},
         "ext": {"PSA_TVM_TORCH_EXT": "1", "PSA_TVM_TORCH_OPENMP": "1"},
         "extgomp": {"PSA_TVM_TORCH_EXT": "1", "PSA_TVM_TORCH_OPENMP": "1"}}
DTYPES = ("float32", "float16", "bfloat16")


def _bench_with_gomp_launcher(argv: list[str]) -> int:
    """``extgomp``: the bench, with GNU OpenMP's launcher in place of the extension's."""
    from psa_tvm.runtime import cpu_pool, torch_ext
    from psa_tvm.tools import bench

    module_for = torch_ext.module_for

    def patched(library_path, *, may_build):
        module = module_for(library_path, may_build=may_build)
        if module is not None and cpu_pool.launcher_kind(library_path) == "external":
            lib = ctypes.CDLL(str(library_path), mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            lib.psa_tvm_set_parallel_launcher.argtypes = [ctypes.c_void_p]
            lib.psa_tvm_set_parallel_launcher(None)
            assert cpu_pool.share_torch_threads(library_path) == "torch_openmp"
        return module

    torch_ext.module_for = patched
    return bench.main(argv)


def summarize(out: Path) -> str:
    runs: dict[str, list[dict]] = {}
    for path in sorted(out.glob("*/bench.json")):
        mode = path.parent.name.rsplit("_", 1)[0]
        runs.setdefault(mode, []).append(json.loads(path.read_text()))
    lines = ["| mode (launcher) | dtype | rows >= 1 MB | worst per run (rows > 1.5) | "
             "median per run |", "|---|---|---|---|---|"]
    for mode in MODES:
        for dtype in DTYPES:
            worst, median, count = [], [], 0
            for data in runs.get(mode, []):
                ratios = [r["ratio_to_copy"] for r in data["cpu_records"]
                          if r["impl"] == "psa_tvm" and r["dtype"] == dtype
                          and r["bytes_moved"] >= 1e6]
                if not ratios:
                    continue
                count = len(ratios)
                worst.append(f"{max(ratios):.2f} ({sum(x > 1.5 for x in ratios)})")
                median.append(f"{statistics.median(ratios):.2f}")
            if worst:
                kinds = sorted({d["meta"].get("cpu_launcher", "?") for d in runs[mode]})
                lines.append(f"| {mode} ({'/'.join(kinds)}) | {dtype} | {count} | "
                             f"{' / '.join(worst)} | {' / '.join(median)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--out", default="cpu-pool-ab")
    parser.add_argument("--summarize", metavar="DIR")
    parser.add_argument("--_extgomp", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._extgomp is not None:
        return _bench_with_gomp_launcher(args._extgomp)
    if args.summarize:
        print(summarize(Path(args.summarize)))
        return 0
    if not args.artifacts:
        parser.error("--artifacts is required")
    out = Path(args.out)
    for round_ in range(1, args.rounds + 1):
        for mode in args.modes:
            bench = ["--cpu-only", "--cpu-threads", str(args.threads),
                     "--out", str(out / f"{mode}_{round_}")]
            cmd = ([sys.executable, __file__, "--_extgomp", *bench] if mode == "extgomp" else
                   [sys.executable, "-m", "psa_tvm.cli", "bench", *bench])
            env = {**os.environ, **MODES[mode], "PSA_TVM_ARTIFACTS": args.artifacts}
            result = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                print(result.stderr[-3000:], file=sys.stderr)
                return result.returncode
            print(f"{mode} round {round_} done", file=sys.stderr, flush=True)
    print(summarize(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
