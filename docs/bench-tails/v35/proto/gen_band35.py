"""Write the library's band forward (psa_tvm/compiler/band.py) for float32 at N = 1065-1080
(37x29) at the CTA shapes of the 16-bit band forwards that win at the same bytes and the same
count of bands (docs/perf.md v35, call 3): 16-bit 32x37x29 (17.6 MB, 512 bands of 16 rows) runs
0.97-0.99x a copy at 4 x 320 threads (v28), where float32 16x37x29 (17.6 MB, 512 bands of 8
rows) ran 1.113 at 4 x 512 (v30), the only 8-row shape measured at 4 CTAs an SM. Each CTA of
both reads one 32-byte sector of every position's input and stores 34 KB in address order; the
float32 kernel at 4 x 512 has 32 registers a thread. (16-row bands at 3 CTAs an SM, 8-row
bands at 5-6 and 4-row bands at 8 spill in the registers their CTAs leave: not built.) One
``band35.cu`` with a ctypes launcher per variant (probe35.py's argument order). Needs TVM:

    python docs/bench-tails/v35/proto/gen_band35.py OUT_DIR
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \
        -Xptxas -v OUT_DIR/band35.cu -o band35.so
"""

from __future__ import annotations

import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (rows, threads, CTAs per SM) at N 1065-1080, float32
VARIANTS = [(8, 512, 4), (8, 384, 4), (8, 320, 4)]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    config = OpConfig(32, 4, "float32")
    sources, launchers, names = [], [], []
    for rows, threads, ctas in VARIANTS:
        params = band.BandParams(rows=rows, threads=threads, ctas_per_sm=ctas, min_n=1065,
                                 max_n=1080, min_numel=0)
        if (why := band.fits(config, params)) is not None:
            print(f"skip r{rows} t{threads} c{ctas}: {why}")
            continue
        name = f"b35_f_r{rows}_t{threads}_c{ctas}_n1065to1080"
        lowered = lower_cuda({name: band.band_forward(config, params, name)})
        smem = lowered.kernels[name]["dynamic_smem_bytes"]
        source = band.min_blocks(lowered.source, {f"{name}_kernel": ctas})
        # One translation unit: the extern shared arrays of the kernels must not share a name.
        sources.append(source.replace("tile_alloc_ptr", f"{name}_tile"))
        units = f"rows * {2 * config.key_dim // rows}"
        launchers.append(
            f'\nextern "C" int {name}(const void* lo, const void* hi, void* out, '
            f"int rows, int n, void* s) {{\n"
            f"  if (rows % 4 || n < 1065 || n > 1080) return 2;\n"
            f"  static const int attr = {smem} ? cudaFuncSetAttribute({name}_kernel, "
            f"cudaFuncAttributeMaxDynamicSharedMemorySize, {smem}) : 0;\n"
            f"  if (attr) return attr;\n"
            f"  const int grid = {units} < {params.ctas} ? {units} : {params.ctas};\n"
            f"  {name}_kernel<<<grid, {threads}, {smem}, (cudaStream_t)s>>>("
            f"(float*)hi, (float*)lo, (float*)out, rows / 4, n);\n"
            f"  return (int)cudaGetLastError();\n}}\n")
        names.append(name)
        print(name, "stage", band.stage_vectors(config, params), "dynamic smem", smem)
    first, *rest = sources
    kernels = [s[s.index('extern "C" __global__'):] for s in rest]
    (out / "band35.cu").write_text("\n".join([first, *kernels, *launchers]))
    (out / "band35.so.txt").write_text("\n".join(names) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
