"""Write the library's band forward (psa_tvm/compiler/band.py, patched by band.patch_source as a
build patches it) at the CTA shapes this round probes (docs/perf.md v36): one
``band36_{dtype}.cu`` a dtype with a ctypes launcher per variant, and ``band36.json`` saying what
each variant runs for:

- float32 ``N`` 297-303 (20x15) at one wave of bands for batch 16 at 4 heads (64 ``B * nh``):
  the tiled kernel there runs 1.04-1.06x a copy (every run since v28) and the shipped 32-row
  band, 128 CTAs at batch 16, 1.10; v35's 8-row L2-hinted band closed the same gap at 37x29;
- 16-bit ``N`` 393-408 (20x20, YOLO11x at 640 px: 6 heads) at batch 64 (384 ``B * nh``), where
  the tiled kernel runs 1.04-1.05: 32-row bands, one wave at 6 CTAs an SM (768 bands <= 792;
  288 or 320 threads: at 224 and 256 the stage of 7-8 vectors spills in the 40 registers ptxas
  gives 6 CTAs), two at 3, 1.45 at 4; and 16-row bands;
- float32 ``N`` 1072-1080 at batch 64 (256 ``B * nh``, the shifted kernel at 1.047-1.050):
  v35's 8-row hinted band past its one wave, and 16-row hinted bands at 2 CTAs an SM.

The launcher's argument order is probe36.py's: ``(lo, hi, out, B * nh, N, stream)``, a
backward's ``(g, d_lo, d_hi, B * nh, N, stream)``. Needs TVM:

    python docs/bench-tails/v36/proto/gen_band36.py OUT_DIR [CALL]   (1, or 4: VARIANTS_CALL4)
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \\
        -Xptxas -v OUT_DIR/band36_float32.cu -o band36_float32.so   (and float16)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (num_heads, dtype, rows, threads, CTAs per SM, l2_fetch, min_n, max_n)
VARIANTS = [
    *[(4, "float32", r, t, c, h, 297, 303) for r, t, c, h in (
        (8, 256, 4, 128), (8, 256, 4, 0), (8, 384, 4, 128), (8, 512, 4, 128),
        (16, 256, 4, 128), (16, 512, 2, 128), (16, 512, 4, 128))],
    *[(nh, "float32", 8, t, 4, 128, 297, 303) for nh in (2, 6) for t in (256, 512)],
    *[(6, "float16", r, t, c, h, 393, 408) for r, t, c, h in (
        (32, 320, 6, 0), (32, 320, 6, 128), (32, 288, 6, 0), (32, 512, 3, 0), (32, 384, 4, 0),
        (16, 256, 6, 0), (16, 256, 4, 0), (16, 256, 4, 128))],
    (4, "float16", 32, 320, 6, 0, 393, 408),
    *[(4, "float32", r, t, c, 128, 1072, 1080) for r, t, c in (
        (8, 512, 4), (16, 1024, 2), (16, 768, 2))],
]


#: Call 4: 16-bit 6-head 20x20 (YOLO11x at 640 px) at batch 16-64, both passes, where the
#: benchmark's rows sit at 1.04-1.05 (forward at batch 16, backward at 16 and 64): 8-row bands
#: (one 16-byte vector a position, 768 bands at batch 16 in one wave of 6 CTAs an SM), 16- and
#: 32-row bands; (pass, num_heads, dtype, rows, threads, CTAs per SM, l2_fetch, min_n, max_n).
VARIANTS_CALL4 = [
    *[("forward", 6, "float16", r, t, c, 0, 399, 401) for r, t, c in (
        (8, 256, 6), (8, 256, 4), (16, 256, 4), (16, 256, 6), (16, 512, 3))],
    *[("backward", 6, "float16", r, t, c, 0, 399, 401) for r, t, c in (
        (8, 256, 6), (16, 256, 4), (16, 256, 6), (16, 384, 4), (32, 256, 4), (32, 512, 2))],
]
#: The tensors a pass's launcher takes, in probe36.py's order.
_TENSORS = {"forward": ("lo", "hi", "out"), "backward": ("g", "dlo", "dhi")}


def main(out: Path, call: str = "1") -> None:
    out.mkdir(parents=True, exist_ok=True)
    sources, launchers, meta = [], [], {}
    variants = [("forward", *v) for v in VARIANTS] if call == "1" else VARIANTS_CALL4
    for pass_, nh, dtype, rows, threads, ctas, fetch, min_n, max_n in variants:
        config = OpConfig(32, nh, dtype)
        params = band.BandParams(pass_=pass_, rows=rows, threads=threads, ctas_per_sm=ctas,
                                 min_n=min_n, max_n=max_n, min_numel=0, l2_fetch=fetch)
        name = (f"b36_{'bwd_' if pass_ == 'backward' else ''}{dtype}_nh{nh}_r{rows}_t{threads}"
                f"_c{ctas}_h{fetch}_n{min_n}to{max_n}")
        if (why := band.fits(config, params)) is not None:
            print(f"skip {name}: {why}")
            continue
        lowered = lower_cuda({name: band.band_pass(config, params, name)})
        kernel = lowered.kernels[name]
        smem = kernel["dynamic_smem_bytes"]
        source = band.patch_source(lowered.source, {f"{name}_kernel": params})
        # One translation unit: the extern shared arrays of the kernels must not share a name.
        sources.append((name, source.replace("tile_alloc_ptr", f"{name}_tile")))
        ctype = {"float32": "float", "float16": "half", "bfloat16": "nv_bfloat16"}[dtype]
        args = []
        for param in kernel["params"]:
            if param["type"] == "ptr":
                args.append(f"({ctype}*){param['tensor']}")
            else:  # the shape symbols: B and N
                args.append({"B": f"rows / {nh}", "N": "n"}[param["name"]])
        units = f"rows * {2 * 32 // rows}"
        first, second, third = _TENSORS[pass_]
        launchers.append((name,
            f'\nextern "C" int {name}(const void* {first}, const void* {second}, void* {third}, '
            f"int rows, int n, void* s) {{\n"
            f"  if (rows % {nh} || n < {min_n} || n > {max_n}) return 2;\n"
            f"  static const int attr = {smem} ? cudaFuncSetAttribute({name}_kernel, "
            f"cudaFuncAttributeMaxDynamicSharedMemorySize, {smem}) : 0;\n"
            f"  if (attr) return attr;\n"
            f"  const int grid = {units} < {params.ctas} ? {units} : {params.ctas};\n"
            f"  {name}_kernel<<<grid, {threads}, {smem}, (cudaStream_t)s>>>("
            f"{', '.join(args)});\n"
            f"  return (int)cudaGetLastError();\n}}\n"))
        meta[name] = {"pass": pass_, "num_heads": nh, "dtype": dtype, "min_n": min_n,
                      "max_n": max_n}
        print(name, "stage", band.stage_vectors(config, params), "dynamic smem", smem,
              flush=True)
    # One translation unit a dtype (TVM's preamble differs by dtype): the first source's
    # includes and helpers, then each kernel from its signature on (a hinted source defines its
    # load helpers ahead of its kernel: keep those once per fetch size).
    for dtype in sorted({meta[name]["dtype"] for name in meta}):
        head, seen, kernels = None, set(), []
        for name, source in sources:
            if meta[name]["dtype"] != dtype:
                continue
            start = source.index('extern "C" __global__')
            if "psa_ld_l2_" in source:
                start = source.index("__device__ __forceinline__")
            if head is None:
                head = source[:start]
            body = source[start:]
            fetch = body.split("psa_ld_l2_", 1)[1].split("_", 1)[0] if "psa_ld_l2_" in body \
                else ""
            if fetch in seen:
                body = body[body.index('extern "C" __global__'):]
            seen.add(fetch)
            kernels.append(body)
        mine = [text for name, text in launchers if meta[name]["dtype"] == dtype]
        (out / f"band36_{dtype}.cu").write_text("\n".join([head, *kernels, *mine]))
        (out / f"band36_{dtype}.so.txt").write_text(
            "".join(f"{name}\n" for name in meta if meta[name]["dtype"] == dtype))
    (out / "band36.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
