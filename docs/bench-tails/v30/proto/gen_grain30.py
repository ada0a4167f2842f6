"""Write the library's float32 shifted forward (psa_tvm/compiler/shifted.py) at every shape
``shifted.fits`` takes with an ownership grain of 4 and 8 vectors (64- and 128-byte units: CTAs
meet on whole 64-byte bursts or 128-byte lines of the output instead of 32-byte sectors), and
the shipped grain-2 shape as the control, into one ``grain30.cu`` with a ctypes launcher per
variant in probe30.py's argument order (docs/perf.md v30, call 1). Call 8 of v29 swept every
grain-2 shape and found none better than the shipped one beyond the spread. Needs TVM:

    python docs/bench-tails/v30/proto/gen_grain30.py OUT_DIR
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \
        -Xptxas -v OUT_DIR/grain30.cu -o grain30.so
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from psa_tvm.compiler import shifted
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (grain, threads, threads a position, positions a thread): the shipped shape (grain 2) and
#: every grain-4 and grain-8 shape ``shifted.fits`` takes at key_dim 32.
FORWARDS = [(2, 256, 4, 1), (2, 256, 4, 2),
            (4, 256, 4, 1), (4, 256, 4, 2), (4, 256, 4, 4), (4, 256, 8, 2), (4, 256, 8, 4),
            (4, 512, 4, 1), (4, 512, 4, 2), (4, 512, 8, 1), (4, 512, 8, 2), (4, 512, 8, 4),
            (8, 512, 8, 1), (8, 512, 8, 2), (8, 512, 8, 4)]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    config = OpConfig(32, 4, "float32")
    sources, launchers, names = [], [], []
    for grain, threads, row_threads, positions in FORWARDS:
        params = replace(shifted.default_params(config), grain=grain, fwd_threads=threads,
                         fwd_row_threads=row_threads, fwd_positions=positions)
        assert shifted.fits(config, params) is None, params
        name = f"g30_f_fwd_g{grain}_t{threads}_r{row_threads}_p{positions}"
        lowered = lower_cuda({name: shifted.shifted_pass(config, "forward", params, name)})
        args = ", ".join(f"(float*){p['tensor']}" if p["type"] == "ptr"
                         else {"B": "rows / 4", "N": "n"}[p["symbol"]]
                         for p in lowered.kernels[name]["params"])
        tile = positions * threads // row_threads
        launchers.append(
            f'\nextern "C" int {name}(const void* lo, const void* hi, void* out, '
            f"int rows, int n, void* s) {{\n"
            f"  if (rows % 4) return 2;\n"
            f"  const dim3 grid((n + {tile - 1}) / {tile}, rows * 2);\n"
            f"  {name}_kernel<<<grid, {threads}, 0, (cudaStream_t)s>>>({args});\n"
            f"  return (int)cudaGetLastError();\n}}\n")
        sources.append(lowered.source)
        names.append(name)
    first, *rest = sources
    kernels = [s[s.index('extern "C" __global__'):] for s in rest]
    (out / "grain30.cu").write_text("\n".join([first, *kernels, *launchers]))
    (out / "grain30.so.txt").write_text("\n".join(names) + "\n")
    print(len(names), "variants")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
