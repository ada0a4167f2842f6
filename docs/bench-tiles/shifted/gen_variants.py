"""Build the shifted-kernel variants of the last sweep (run5.jsonl) from psa_tvm.compiler.shifted
into cubins for bench_variants.py (docs/perf.md v13). Needs TVM and nvcc; writes into OUT_DIR.

    python gen_variants.py OUT_DIR
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from psa_tvm.compiler import shifted
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.compiler.shifted import ShiftedParams
from psa_tvm.config import OpConfig

# (fwd_threads, fwd_row_threads, fwd_positions, bwd_tile_n, bwd_threads, bwd_row_threads)
VARIANTS = {
    "float16": [(256, 2, 1, 120, 256, 2), (256, 2, 2, 248, 256, 2), (256, 4, 2, 120, 128, 2),
                (512, 2, 1, 248, 512, 2), (256, 2, 4, 56, 128, 2), (256, 4, 4, 248, 256, 4)],
    "float32": [(256, 4, 1, 60, 256, 2), (256, 4, 2, 124, 256, 2), (256, 2, 2, 60, 128, 2),
                (256, 4, 4, 124, 256, 4)],
}


def write_cubins(out: Path, variants: dict[str, list[ShiftedParams]],
                 tag_of: Callable[[str, OpConfig, ShiftedParams], str]) -> None:
    """Each dtype's ``variants`` (kd=32, nh=4) into ``shift_<dtype>.cubin`` with their kernels
    named ``fwd_<tag>``/``bwd_<tag>``, and ``shift_meta.json`` (also used by v14's sweep,
    docs/bench-tiles/shifted-aligned/)."""
    out.mkdir(parents=True, exist_ok=True)
    meta = {}
    for dtype, sets in variants.items():
        config = OpConfig(32, 4, dtype)
        funcs = {}
        for params in sets:
            if (why := shifted.fits(config, params)) is not None:
                print("skipped", dtype, params, why)
                continue
            tag = tag_of(dtype, config, params)
            funcs[f"fwd_{tag}"] = shifted.shifted_forward(config, params, f"fwd_{tag}")
            funcs[f"bwd_{tag}"] = shifted.shifted_backward(config, params, f"bwd_{tag}")
            meta[tag] = {"dtype": dtype, "threads": params.fwd_threads,
                         "tile": params.fwd_positions * params.fwd_threads
                         // params.fwd_row_threads,
                         "tile_bwd": params.bwd_tile_n, "threads_bwd": params.bwd_threads}
        source = out / f"shift_{dtype}.cu"
        source.write_text(pack_16bit_gathers(lower_cuda(funcs).source, dtype))
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", str(source),
                        "-o", str(out / f"shift_{dtype}.cubin")], check=True)
    (out / "shift_meta.json").write_text(json.dumps(meta, indent=1))


def main(out: Path) -> None:
    def tag_of(dtype: str, config: OpConfig, p: ShiftedParams) -> str:
        return (f"{dtype[0]}{config.itemsize * 8}_f{p.fwd_threads}r{p.fwd_row_threads}"
                f"p{p.fwd_positions}_b{p.bwd_tile_n}t{p.bwd_threads}r{p.bwd_row_threads}")

    write_cubins(out, {dtype: [ShiftedParams(fwd_threads=fwd_t, fwd_row_threads=fwd_rt,
                                             fwd_positions=ppt, bwd_tile_n=bwd_tile,
                                             bwd_threads=bwd_t, bwd_row_threads=bwd_rt)
                               for fwd_t, fwd_rt, ppt, bwd_tile, bwd_t, bwd_rt in sets]
                       for dtype, sets in VARIANTS.items()}, tag_of)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
