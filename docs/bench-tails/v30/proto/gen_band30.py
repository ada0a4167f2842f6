"""Write the library's band forward (psa_tvm/compiler/band.py) for float32 at N = 1065-1080
(37x29) with 16-row bands in 69 KB of dynamic shared memory, the shapes whose bands fill one wave
of the GPU's CTAs at 56-66 ``B * nh`` (v28 calls 1-2 measured 2 x 1024 threads at 16x37x29:
1.053 and 1.038 against the shipped shifted forward's 1.081 and 1.064; not shipped), into one
``band30.cu`` with a ctypes launcher per variant (probe30.py's argument order; docs/perf.md v30,
call 2). Needs TVM:

    python docs/bench-tails/v30/proto/gen_band30.py OUT_DIR
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \
        -Xptxas -v OUT_DIR/band30.cu -o band30.so
"""

from __future__ import annotations

import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (rows, threads, CTAs per SM) at N 1065-1080, float32
VARIANTS = [(16, 1024, 2), (16, 768, 2), (16, 896, 2), (16, 512, 2), (16, 640, 3),
            (8, 512, 4)]


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
        name = f"b30_f_r{rows}_t{threads}_c{ctas}_n1065to1080"
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
            f"  static const int attr = cudaFuncSetAttribute({name}_kernel, "
            f"cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});\n"
            f"  if (attr) return attr;\n"
            f"  const int grid = {units} < {params.ctas} ? {units} : {params.ctas};\n"
            f"  {name}_kernel<<<grid, {threads}, {smem}, (cudaStream_t)s>>>("
            f"(float*)hi, (float*)lo, (float*)out, rows / 4, n);\n"
            f"  return (int)cudaGetLastError();\n}}\n")
        names.append(name)
        print(name, "stage", band.stage_vectors(config, params), "dynamic smem", smem)
    first, *rest = sources
    kernels = [s[s.index('extern "C" __global__'):] for s in rest]
    (out / "band30.cu").write_text("\n".join([first, *kernels, *launchers]))
    (out / "band30.so.txt").write_text("\n".join(names) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
