"""Build shifted-kernel variants (psa_tvm.compiler.shifted) into cubins for bench_variants.py:
the sweep of docs/perf.md v14 (shifted kernels at aligned N, grain 4, other tiles). Needs TVM
and nvcc; writes into OUT_DIR.

    python gen_variants.py OUT_DIR
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from psa_tvm.compiler import shifted
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.compiler.shifted import ShiftedParams
from psa_tvm.config import OpConfig

# forward (threads, row_threads, positions, grain) paired with backward (tile_n, threads,
# row_threads): each tag builds one of each; the first pair is the library's default.
VARIANTS = {
    "float16": [((256, 2, 2, 2), (248, 256, 4)), ((512, 4, 4, 4), (248, 256, 2)),
                ((256, 2, 1, 2), (120, 128, 4)), ((512, 4, 2, 4), (504, 512, 4)),
                ((256, 4, 2, 2), (120, 256, 4)), ((256, 2, 4, 2), (248, 512, 4)),
                ((512, 2, 1, 2), (56, 128, 4)), ((512, 4, 1, 4), (504, 256, 4))],
    "float32": [((256, 4, 1, 2), (124, 256, 4)), ((256, 4, 1, 4), (124, 256, 8)),
                ((256, 4, 2, 4), (60, 128, 4)), ((512, 4, 1, 4), (252, 256, 4)),
                ((256, 8, 2, 4), (124, 128, 4)), ((256, 4, 2, 2), (252, 512, 8)),
                ((256, 4, 4, 4), (60, 256, 4))],
}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {}
    for dtype, variants in VARIANTS.items():
        config = OpConfig(32, 4, dtype)
        funcs = {}
        for (fwd_t, fwd_rt, ppt, grain), (bwd_tile, bwd_t, bwd_rt) in variants:
            params = ShiftedParams(fwd_threads=fwd_t, fwd_row_threads=fwd_rt,
                                   fwd_positions=ppt, grain=grain, bwd_tile_n=bwd_tile,
                                   bwd_threads=bwd_t, bwd_row_threads=bwd_rt)
            if (why := shifted.fits(config, params)) is not None:
                print("skipped", dtype, params, why)
                continue
            tag = (f"{dtype[0]}{config.itemsize * 8}_f{fwd_t}r{fwd_rt}p{ppt}g{grain}"
                   f"_b{bwd_tile}t{bwd_t}r{bwd_rt}")
            funcs[f"fwd_{tag}"] = shifted.shifted_forward(config, params, f"fwd_{tag}")
            funcs[f"bwd_{tag}"] = shifted.shifted_backward(config, params, f"bwd_{tag}")
            meta[tag] = {"dtype": dtype, "tile": ppt * fwd_t // fwd_rt, "threads": fwd_t,
                         "tile_bwd": bwd_tile, "threads_bwd": bwd_t}
        source = out / f"shift_{dtype}.cu"
        source.write_text(pack_16bit_gathers(lower_cuda(funcs).source, dtype))
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", str(source),
                        "-o", str(out / f"shift_{dtype}.cubin")], check=True)
    (out / "shift_meta.json").write_text(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
