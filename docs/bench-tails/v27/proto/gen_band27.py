"""Write the library's band forward (psa_tvm/compiler/band.py) at N = 1065-1080 (37x29) for
other thread counts, CTAs per SM and band heights into one ``band27.cu`` with a ctypes launcher
per variant, in probe_band_lib.py's argument order (docs/perf.md v27, call 1). Needs TVM:

    python docs/bench-tails/v27/proto/gen_band27.py OUT_DIR
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \
        -Xptxas -v OUT_DIR/band27.cu -o band27.so
"""

from __future__ import annotations

import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (dtype tag, rows, threads, CTAs per SM) at N 1065-1080
VARIANTS = [
    ("h", 16, 512, 2), ("h", 16, 512, 3), ("h", 16, 512, 4), ("h", 16, 768, 2),
    ("h", 16, 1024, 2), ("h", 8, 256, 8), ("h", 8, 512, 4), ("h", 8, 1024, 2),
    ("f", 8, 512, 2), ("f", 8, 512, 3), ("f", 8, 512, 4), ("f", 8, 1024, 2), ("f", 8, 256, 8),
]
DTYPES = {"h": ("float16", "half"), "f": ("float32", "float")}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    sources, launchers = [], []
    for tag, rows, threads, ctas in VARIANTS:
        dtype, ctype = DTYPES[tag]
        config = OpConfig(32, 4, dtype)
        params = band.BandParams(rows=rows, threads=threads, ctas_per_sm=ctas, min_n=1065,
                                 max_n=1080, min_numel=0)
        if (why := band.fits(config, params)) is not None:
            print(f"skip {tag} r{rows} t{threads} c{ctas}: {why}")
            continue
        name = f"b27_{tag}_r{rows}_t{threads}_c{ctas}"
        lowered = lower_cuda({name: band.band_forward(config, params, name)})
        source = band.min_blocks(pack_16bit_gathers(lowered.source, dtype),
                                 {f"{name}_kernel": params.ctas_per_sm})
        sources.append(source)
        units = f"rows * {2 * config.key_dim // params.rows}"
        launchers.append(
            f'\nextern "C" int {name}(const void* lo, const void* hi, void* out, '
            f"int rows, int n, void* s) {{\n"
            f"  if (rows % 4) return 2;\n"
            f"  const int grid = {units} < {params.ctas} ? {units} : {params.ctas};\n"
            f"  {name}_kernel<<<grid, {params.threads}, 0, (cudaStream_t)s>>>("
            f"({ctype}*)hi, ({ctype}*)lo, ({ctype}*)out, rows / 4, n);\n"
            f"  return (int)cudaGetLastError();\n}}\n")
        print(name, "stage", band.stage_vectors(config, params))
    # One translation unit: the generated preambles repeat, so keep the first one whole and
    # only the kernels of the others.
    first, *rest = sources
    kernels = [s[s.index('extern "C" __global__'):] for s in rest]
    (out / "band27.cu").write_text("\n".join([first, *kernels, *launchers]))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
