"""Build shifted-kernel variants (psa_tvm.compiler.shifted) into cubins for bench_variants.py:
the sweep of docs/perf.md v14 (shifted kernels at aligned N, grain 4, other tiles). Needs TVM
and nvcc; writes into OUT_DIR.

    python gen_variants.py OUT_DIR
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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
    def tag_of(dtype: str, config: OpConfig, p: ShiftedParams) -> str:
        return (f"{dtype[0]}{config.itemsize * 8}_f{p.fwd_threads}r{p.fwd_row_threads}"
                f"p{p.fwd_positions}g{p.grain}_b{p.bwd_tile_n}t{p.bwd_threads}"
                f"r{p.bwd_row_threads}")

    v13 = _load_v13()
    v13.write_cubins(out, {dtype: [
        ShiftedParams(fwd_threads=fwd_t, fwd_row_threads=fwd_rt, fwd_positions=ppt, grain=grain,
                      bwd_tile_n=bwd_tile, bwd_threads=bwd_t, bwd_row_threads=bwd_rt)
        for (fwd_t, fwd_rt, ppt, grain), (bwd_tile, bwd_t, bwd_rt) in sets]
        for dtype, sets in VARIANTS.items()}, tag_of)


def _load_v13():
    """v13's generator (docs/bench-tiles/shifted/gen_variants.py), whose cubin writer this
    sweep shares."""
    spec = importlib.util.spec_from_file_location(
        "shifted_v13_gen", Path(__file__).parent.parent / "shifted" / "gen_variants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main(Path(sys.argv[1]))
