"""Write the band forward as TVM generates it for the library (psa_tvm/compiler/band.py, kd 32,
the default params) into ``tirband_{h,f}.cu`` with a ctypes launcher in probe_tma's argument
order, and ``tirband_{h,f}b.cu``: the same kernel with v25 prband.cu's store loop (a pointer
and a per-thread bound) in place of TVM's (docs/perf.md v26, call 3). Needs TVM:

    python docs/bench-tails/v26/proto/gen_tirband.py OUT_DIR
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \
        OUT_DIR/tirband_V.cu -o tirband_V.so  # V = h, hb, f, fb: one library each
"""

from __future__ import annotations

import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for dtype, tag, ctype in (("float16", "h", "half"), ("float32", "f", "float")):
        config = OpConfig(32, 4, dtype)
        params = band.default_params(config)[0]
        name = f"tirband_{tag}"
        lowered = lower_cuda({name: band.band_forward(config, params, name)})
        source = band.min_blocks(pack_16bit_gathers(lowered.source, dtype),
                                 {f"{name}_kernel": params.ctas_per_sm})
        start = source.index("    for (int i = 0; i < ((N + ")
        end = source.index("    __syncthreads();", start)
        loop = (f"    {{ uint4* d4 = (uint4*)(out_flat_ptr + dst); "
                f"const uint4* t4 = (const uint4*)tile_alloc_ptr;\n"
                f"      for (int i = threadIdx.x; i < N * {params.rows * config.itemsize // 16};"
                f" i += {params.threads}) d4[i] = t4[i]; }}\n")
        pointer_loop = (source[:start] + loop + source[end:]).replace(
            f"{name}_kernel", f"{name}b_kernel")
        units = f"rows * {2 * config.key_dim // params.rows}"
        for symbol, text in ((name, source), (f"{name}b", pointer_loop)):
            # rows = B * nh; the kernel reads only that product, so B = rows / 4 serves any nh
            # whose rows divide by 4.
            launcher = (
                f'\nextern "C" int {symbol}(const void* lo, const void* hi, void* out, '
                f"int rows, int n, void* s) {{\n"
                f"  if (rows % 4) return 2;\n"
                f"  const int grid = {units} < {params.ctas} ? {units} : {params.ctas};\n"
                f"  {symbol}_kernel<<<grid, {params.threads}, 0, (cudaStream_t)s>>>("
                f"({ctype}*)hi, ({ctype}*)lo, ({ctype}*)out, rows / 4, n);\n"
                f"  return (int)cudaGetLastError();\n}}\n")
            (out / f"{symbol}.cu").write_text(text + launcher)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
