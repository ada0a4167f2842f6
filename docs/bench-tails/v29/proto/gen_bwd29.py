"""Write the library's band backward (psa_tvm/compiler/band.band_backward) at a set of shapes
into one ``bwd29.cu`` with a ctypes launcher per variant, ``(g, d_lo, d_hi, rows, N,
stream)`` (docs/perf.md v29, call 1). Needs TVM:

    python docs/bench-tails/v29/proto/gen_bwd29.py OUT_DIR [CALL]  # CALL 1 or 4
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \
        -Xptxas -v OUT_DIR/bwd29.cu -o bwd29.so

Each symbol names its dtype, rows, threads, CTAs an SM and N range; probe29.py runs a variant
only at the N its tile holds.
"""

from __future__ import annotations

import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (dtype tag, rows, threads, CTAs per SM, first N, last N)
VARIANTS = [
    # 16-bit 37x29: v28's forward shape (16 rows, 4 CTAs an SM: 528 a wave), more threads,
    # and v26's 32-row band (69 KB of dynamic shared memory)
    *[("h", 16, t, 4, 1065, 1080) for t in (320, 384, 448, 512)],
    ("h", 16, 512, 3, 1065, 1080), ("h", 16, 1024, 2, 1065, 1080),
    ("h", 32, 768, 2, 1065, 1080), ("h", 32, 512, 2, 1065, 1080),
    # 16-bit 40x23 (N 897-960)
    *[("h", 16, t, 4, 897, 960) for t in (256, 320, 384, 512)],
    # float32 37x29: 8-row bands (a 32-byte sector of a position), 16-row bands in 69 KB
    *[("f", 8, t, 4, 1065, 1080) for t in (320, 384, 512)],
    ("f", 8, 320, 3, 1065, 1080), ("f", 8, 384, 3, 1065, 1080), ("f", 8, 512, 2, 1065, 1080),
    ("f", 16, 768, 2, 1065, 1080), ("f", 16, 512, 3, 1065, 1080),
]
#: Call 4: call 1-3's winners, 16 rows at 4 CTAs an SM for N 897-960 and 32 rows for the N
#: between 1073 and 1079 (at 1072 and 1080 they lost by 0.08-0.10), at more thread counts.
VARIANTS_CALL4 = [
    *[("h", 16, t, 4, 897, 960) for t in (256, 320, 384)],
    *[("h", 32, t, 2, 1073, 1079) for t in (512, 576, 640)],
    *[("h", 16, t, 4, 1073, 1079) for t in (320, 384)],
]
DTYPES = {"h": ("float16", "half"), "f": ("float32", "float")}


def main(out: Path, call: str = "1") -> None:
    out.mkdir(parents=True, exist_ok=True)
    sources, launchers, names = [], [], []
    for tag, rows, threads, ctas, min_n, max_n in VARIANTS_CALL4 if call == "4" else VARIANTS:
        dtype, ctype = DTYPES[tag]
        config = OpConfig(32, 4, dtype)
        params = band.BandParams(rows=rows, threads=threads, ctas_per_sm=ctas, min_n=min_n,
                                 max_n=max_n, min_numel=0)
        why = band.fits(config, params)
        if why is not None and "stage vectors" not in why:  # a spill is ptxas's to report
            print(f"skip {tag} r{rows} t{threads} c{ctas}: {why}")
            continue
        name = f"b29_{tag}_r{rows}_t{threads}_c{ctas}_n{min_n}to{max_n}"
        lowered = lower_cuda({name: band.band_backward(config, params, name)})
        kernel = lowered.kernels[name]
        smem = kernel["dynamic_smem_bytes"]
        source = band.min_blocks(pack_16bit_gathers(lowered.source, dtype),
                                 {f"{name}_kernel": params.ctas_per_sm})
        sources.append(source.replace("tile_alloc_ptr", f"{name}_tile"))
        pointers = {"g": "g", "dlo": "dlo", "dhi": "dhi"}
        args = [f"({ctype}*){pointers[p['tensor']]}" if p["type"] == "ptr"
                else {"B": "rows / 4", "N": "n"}[p["symbol"]] for p in kernel["params"]]
        units = f"rows * {2 * config.key_dim // params.rows}"
        launchers.append(
            f'\nextern "C" int {name}(const void* g, void* dlo, void* dhi, '
            f"int rows, int n, void* s) {{\n"
            f"  if (rows % 4) return 2;\n"
            f"  static const int attr = cudaFuncSetAttribute({name}_kernel, "
            f"cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});\n"
            f"  if (attr) return attr;\n"
            f"  const int grid = {units} < {params.ctas} ? {units} : {params.ctas};\n"
            f"  {name}_kernel<<<grid, {params.threads}, {smem}, (cudaStream_t)s>>>("
            f"{', '.join(args)});\n"
            f"  return (int)cudaGetLastError();\n}}\n")
        names.append(name)
        print(name, "stage", band.stage_vectors(config, params), "dynamic smem", smem)
    first, *rest = sources
    kernels = [s[s.index('extern "C" __global__'):] for s in rest]
    (out / "bwd29.cu").write_text("\n".join([first, *kernels, *launchers]))
    (out / "bwd29.so.txt").write_text("\n".join(names) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
