"""Write the library's band forward (psa_tvm/compiler/band.py, patched by band.patch_source as a
build patches it) at the CTA shapes this round probes (docs/perf.md v37, call 1): one
``band37_{dtype}.cu`` a dtype with a ctypes launcher per variant, and ``band37.json`` saying what
each variant runs for (``N`` range, and the ``B * nh`` at which sweep37.py times it). The
generator is gen_band36.py's with this round's variants.

The launcher's argument order is sweep37.py's: ``(lo, hi, out, B * nh, N, stream)``. Needs TVM:

    python docs/bench-tails/v37/proto/gen_band37.py OUT_DIR [CALL]   (1, or 2: VARIANTS_CALL2)
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \\
        -Xptxas -v OUT_DIR/band37_float32.cu -o band37_float32.so   (and float16)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: (pass, num_heads, dtype, rows, threads, CTAs per SM, l2_fetch, min_n, max_n, first and last
#: ``B * nh`` the probe runs it at). float32 20x15 past the 16-row band's 264 ``B * nh``, where
#: v27's 32-row band runs 1.06-1.09x a copy; 16-bit 20x20 between the 8-row band's 99 and the
#: 16-row band's 360 (v36 measured 16 rows winning at 144 and 192 at 6 heads), at every head
#: count.
VARIANTS = [
    *[("forward", nh, "float32", 16, t, 4, 128, 297, 303, 200, 520)
      for nh in (2, 4, 6) for t in (512, 384)],
    *[("forward", nh, "float16", 16, 256, 6, 0, 399, 401, 96, 420) for nh in (2, 4, 6)],
    *[("forward", nh, "float16", 16, 512, 3, 0, 399, 401, 96, 420) for nh in (4, 6)],
]
#: Call 2: the band shapes already shipped or measured, at the call sizes where call 1's sweep
#: put the shipped kernel above 1.05x a copy: 16-bit ``N`` 297-303 both passes (the 8-byte
#: ``v4k8`` kernels, 1.06-1.16), 16-bit 37x29 forwards (``s8``, 1.05-1.25) and backwards
#: (1.05-1.17), float32 37x29 forwards (``s4``, 1.05-1.10) and float32 20x15 past 264 ``B * nh``.
F16_300 = (297, 303)
VARIANTS_CALL2 = [
    *[("forward", nh, "float16", r, t, c, 0, *F16_300, 48, 800) for nh in (2, 4, 6)
      for r, t, c in ((8, 256, 6), (16, 256, 6), (16, 512, 3), (32, 512, 2))],
    *[("backward", nh, "float16", r, t, c, 0, *F16_300, 48, 800) for nh in (2, 4, 6)
      for r, t, c in ((16, 384, 4), (16, 256, 6), (32, 512, 2))],
    *[("forward", nh, "float16", r, t, c, 0, 1072, 1080, 16, 800) for nh in (2, 4, 6)
      for r, t, c in ((8, 512, 4), (16, 512, 3), (16, 320, 4), (16, 384, 4))],
    *[("backward", nh, "float16", 32, t, 2, 0, 1073, 1079, 16, 800) for nh in (2, 4, 6)
      for t in (576, 640)],
    *[("forward", nh, "float32", r, t, c, 128, 1072, 1080, 16, 400) for nh in (2, 4, 6)
      for r, t, c in ((8, 512, 4), (8, 384, 4), (16, 768, 2))],
    *[("forward", nh, "float32", r, t, 4, 128, 297, 303, 265, 800) for nh in (2, 4, 6)
      for r, t in ((16, 512), (8, 384))],
]
#: The tensors a pass's launcher takes, in sweep37.py's order.
_TENSORS = {"forward": ("lo", "hi", "out"), "backward": ("g", "dlo", "dhi")}


def main(out: Path, call: str = "1") -> None:
    out.mkdir(parents=True, exist_ok=True)
    sources, launchers, meta = [], [], {}
    for pass_, nh, dtype, rows, threads, ctas, fetch, min_n, max_n, first_rows, last_rows \
            in (VARIANTS if call == "1" else VARIANTS_CALL2):
        config = OpConfig(32, nh, dtype)
        params = band.BandParams(pass_=pass_, rows=rows, threads=threads, ctas_per_sm=ctas,
                                 min_n=min_n, max_n=max_n, min_numel=0, l2_fetch=fetch)
        name = (f"b37_{'bwd_' if pass_ == 'backward' else ''}{dtype}_nh{nh}_r{rows}_t{threads}"
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
                      "max_n": max_n, "first_rows": first_rows, "last_rows": last_rows}
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
        (out / f"band37_{dtype}.cu").write_text("\n".join([head, *kernels, *mine]))
        (out / f"band37_{dtype}.so.txt").write_text(
            "".join(f"{name}\n" for name in meta if meta[name]["dtype"] == dtype))
    (out / "band37.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
