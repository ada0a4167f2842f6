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

import itertools
import re
import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (rows, threads, CTAs per SM) at N 1065-1080, float32
VARIANTS = [(8, 512, 4), (8, 384, 4), (8, 320, 4)]
#: Call 7: the same kernels with their stage loads hinted to fetch whole lines into L2 (PTX
#: ``ld.global.nc.L2::128B`` / ``::256B``; what ran, before the library took it as
#: ``BandParams.l2_fetch`` and ``band.fetch_hints``): the first of a unit's four bands to miss
#: a line brings all four sectors, which the other three then find in L2, as a 16-bit band's
#: two-sector reads do (None: the plain kernel).
HINTS = [None, "128B", "256B"]

_LOAD = re.compile(r"\*\(float4\*\)\(((?:lo|hi)_flat_ptr) \+ ")
_HELPERS = """
__device__ __forceinline__ float4 psa_ld_hint_128B(const float* p) {
  float4 v;
  asm("ld.global.nc.L2::128B.v4.f32 {%0, %1, %2, %3}, [%4];"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float4 psa_ld_hint_256B(const float* p) {
  float4 v;
  asm("ld.global.nc.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
"""


def hint_loads(source: str, hint: str) -> str:
    """Every ``*(float4*)(lo_flat_ptr + i)`` / ``hi_flat_ptr`` load of ``source`` through the
    ``hint`` helper (the band forward reads its inputs only in its stage loads)."""
    out, pos = [], 0
    while match := _LOAD.search(source, pos):
        depth, i = 1, match.end()
        while depth:  # the index expression ends at the paren that closes the cast's operand
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        out.append(source[pos:match.start()])
        out.append(f"psa_ld_hint_{hint}({match.group(1)} + {source[match.end():i - 1]})")
        pos = i
    out.append(source[pos:])
    return "".join(out)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    config = OpConfig(32, 4, "float32")
    sources, launchers, names = [], [], []
    for (rows, threads, ctas), hint in itertools.product(VARIANTS, HINTS):
        params = band.BandParams(rows=rows, threads=threads, ctas_per_sm=ctas, min_n=1065,
                                 max_n=1080, min_numel=0)
        if (why := band.fits(config, params)) is not None:
            print(f"skip r{rows} t{threads} c{ctas}: {why}")
            continue
        name = f"b35_f_r{rows}_t{threads}_c{ctas}{'_' + hint if hint else ''}_n1065to1080"
        lowered = lower_cuda({name: band.band_forward(config, params, name)})
        smem = lowered.kernels[name]["dynamic_smem_bytes"]
        source = band.min_blocks(lowered.source, {f"{name}_kernel": ctas})
        if hint:
            source = hint_loads(source, hint)
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
    head = first.index('extern "C" __global__')
    first = first[:head] + _HELPERS + first[head:]
    kernels = [s[s.index('extern "C" __global__'):] for s in rest]
    (out / "band35.cu").write_text("\n".join([first, *kernels, *launchers]))
    (out / "band35.so.txt").write_text("\n".join(names) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
