"""Write the library's band forward (psa_tvm/compiler/band.py) at N = 1065-1080 (37x29) with
bands past 48 KB of shared memory (16-bit 32-row bands, float32 16- and 32-row bands) and with
two shared tiles a CTA, into one ``band28.cu`` with a ctypes launcher per variant, in
probe27.py's argument order (docs/perf.md v28, call 1). Needs TVM:

    python docs/bench-tails/v28/proto/gen_band28.py OUT_DIR [CALL]  # CALL 1, 2, 3 or 4
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \
        -Xptxas -v OUT_DIR/band28.cu -o band28.so

Calls 1-2 ran it at commit ad8ea1f, whose ``BandParams`` had a ``tiles`` field (two shared
tiles a CTA), call 3 at the next commit, which had a ``swizzle`` field (an XOR-swizzled tile);
both were taken out once measured (docs/perf.md v28).
"""

from __future__ import annotations

import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (dtype tag, rows, threads, CTAs per SM, tiles) at N 1065-1080
VARIANTS = [
    # 16-bit: v27's shipped shapes with two tiles, and 32-row bands (69 KB a tile)
    ("h", 16, 1024, 2, 1), ("h", 16, 1024, 2, 2), ("h", 16, 512, 3, 2), ("h", 16, 768, 2, 2),
    ("h", 8, 512, 4, 2), ("h", 8, 1024, 2, 2),
    ("h", 32, 1024, 2, 1), ("h", 32, 1024, 1, 2), ("h", 32, 640, 3, 1), ("h", 32, 768, 2, 1),
    # float32: 16-row bands (69 KB a tile), 32-row bands (138 KB)
    ("f", 16, 1024, 2, 1), ("f", 16, 1024, 1, 2), ("f", 16, 640, 3, 1), ("f", 16, 768, 2, 1),
    ("f", 16, 512, 2, 1), ("f", 32, 1024, 1, 1), ("f", 8, 512, 3, 2), ("f", 8, 1024, 2, 2),
]
#: Call 2: the call-size sweep of call 1's best, beside v27's shipped band kernels and a 32-row
#: 16-bit band at three CTAs an SM (it spills) (docs/perf.md v28).
VARIANTS_CALL2 = [
    ("h", 32, 768, 2, 1), ("h", 32, 384, 3, 1), ("h", 16, 1024, 2, 1), ("h", 16, 512, 3, 1),
    ("h", 8, 512, 4, 1), ("f", 16, 1024, 2, 1), ("f", 16, 768, 2, 1),
]
#: Call 3: call 1-2's kernels with the tile swizzled and not, at two N ranges
#: (dtype tag, rows, threads, CTAs per SM, tiles, swizzle, min N, max N).
VARIANTS_CALL3 = [
    *[(tag, rows, threads, ctas, 1, swizzle, 1065, 1080)
      for tag, rows, threads, ctas in (("h", 32, 768, 2), ("h", 16, 1024, 2), ("h", 16, 512, 3),
                                       ("f", 16, 1024, 2), ("f", 16, 768, 2))
      for swizzle in (False, True)],
    ("h", 16, 256, 4, 1, False, 897, 960), ("h", 16, 256, 4, 1, True, 897, 960),
]
#: Call 4: 16-row 16-bit bands at 4 CTAs an SM with more threads than 256 (a stage of at most 8
#: vectors at N = 1080; 1024 bands of batch 64 at 4 heads fill two waves of 528), and the
#: 32-row band of calls 1-3 at the N between 1073 and 1080.
VARIANTS_CALL4 = [
    ("h", 16, 288, 4, 1, False, 1065, 1080), ("h", 16, 320, 4, 1, False, 1065, 1080),
    ("h", 16, 384, 4, 1, False, 1065, 1080), ("h", 16, 256, 4, 1, False, 1065, 1080),
    ("h", 32, 768, 2, 1, False, 1065, 1080), ("h", 16, 1024, 2, 1, False, 1065, 1080),
]
DTYPES = {"h": ("float16", "half"), "f": ("float32", "float")}


def main(out: Path, call: str = "1") -> None:
    out.mkdir(parents=True, exist_ok=True)
    sources, launchers, names = [], [], []
    variants = {"1": VARIANTS, "2": VARIANTS_CALL2}.get(call)
    if variants is not None:
        variants = [(*v, False, 1065, 1080) for v in variants]
    later = VARIANTS_CALL4 if call == "4" else VARIANTS_CALL3
    for tag, rows, threads, ctas, tiles, swizzle, min_n, max_n in variants or later:
        dtype, ctype = DTYPES[tag]
        config = OpConfig(32, 4, dtype)
        # Only the options a call used: each ran at a commit whose BandParams had them.
        options = {**({"tiles": tiles} if tiles != 1 else {}),
                   **({"swizzle": swizzle} if swizzle else {})}
        params = band.BandParams(rows=rows, threads=threads, ctas_per_sm=ctas, min_n=min_n,
                                 max_n=max_n, min_numel=0, **options)
        why = band.fits(config, params)
        if why is not None and "stage vectors" not in why:  # a spill is ptxas's to report
            print(f"skip {tag} r{rows} t{threads} c{ctas} x{tiles}: {why}")
            continue
        name = f"b28_{tag}_r{rows}_t{threads}_c{ctas}_x{tiles}"
        if variants is None:  # calls 3-4 name the swizzle and the N range (probe28.py reads it)
            name += f"_s{int(swizzle)}_n{min_n}to{max_n}"
        lowered = lower_cuda({name: band.band_forward(config, params, name)})
        smem = lowered.kernels[name]["dynamic_smem_bytes"]
        source = band.min_blocks(pack_16bit_gathers(lowered.source, dtype),
                                 {f"{name}_kernel": params.ctas_per_sm})
        # One translation unit: extern shared arrays of two element types would clash.
        sources.append(source.replace("tile_alloc_ptr", f"{name}_tile"))
        units = f"rows * {2 * config.key_dim // params.rows}"
        launchers.append(
            f'\nextern "C" int {name}(const void* lo, const void* hi, void* out, '
            f"int rows, int n, void* s) {{\n"
            f"  if (rows % 4) return 2;\n"
            f"  static const int attr = cudaFuncSetAttribute({name}_kernel, "
            f"cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});\n"
            f"  if (attr) return attr;\n"
            f"  const int grid = {units} < {params.ctas} ? {units} : {params.ctas};\n"
            f"  {name}_kernel<<<grid, {params.threads}, {smem}, (cudaStream_t)s>>>("
            f"({ctype}*)hi, ({ctype}*)lo, ({ctype}*)out, rows / 4, n);\n"
            f"  return (int)cudaGetLastError();\n}}\n")
        names.append(name)
        print(name, "stage", band.stage_vectors(config, params), "dynamic smem", smem)
    first, *rest = sources
    kernels = [s[s.index('extern "C" __global__'):] for s in rest]
    (out / "band28.cu").write_text("\n".join([first, *kernels, *launchers]))
    (out / "band28.so.txt").write_text("\n".join(names) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
