"""v44: band-forward candidates for key_dim 128 (8 heads, 16-bit) at the call sizes where its
shipped bands run above 1.05x a copy (v42's call 3 and v43's sweep, H100): 20x15 from 16
batches (1.05-1.18), 40x23 from 8 (1.07-1.14) and 37x29 from 16 (1.06-1.09). v42's candidates
(``v42/proto/bands42.py``) were timed at 1-16 batches only, where a call holds about one wave
of bands; key_dim 32's bands past a wave took other shapes (16-row at 4 x 384 for two waves of
37x29, 32-row from 368 ``B * nh`` at float32 20x15). So: the same grid and its neighbours,
forwards only (band backwards lost at every 16-bit grid of key_dim 128), timed at the sizes
that miss.

    python bands44.py count
    python bands44.py build OUT_ROOT [-j 2]     # OUT_ROOT/f128_{20x15,40x23,37x29}

Each directory gets its :data:`TIMED` shapes in ``timed.txt``, which ``v43/lib.sh``'s
``tune_dir`` reads (the GPU host has no TVM to import this module).

Build 0 of each directory has no band (the tiled and shifted kernels the bands replaced);
every other build holds one forward candidate from the first merged element, so it is what
runs at every timed shape of its ``N`` range. The shipped band of each grid is among the
candidates (20x15: 16 x 256 x 6, 40x23: 16 x 512 x 3, 37x29: 32 x 576 x 2, all hinted).
Ranked with ``v42/proto/rank_bands42.py ROOT DIR...``. float16 only: bfloat16 moves its bytes
in the same order.
"""

from __future__ import annotations

import sys
from pathlib import Path

from psa_tvm.compiler import band
from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
from psa_tvm.presets import PRESETS
from psa_tvm.tools.tune import _tuned_tiled_params

TAG = "kd128_nh8_float16"
#: The N ranges of the shipped bands at these grids (band._20X15_N, _40X23_N, _TAIL_N).
RANGES = {"20x15": (297, 303), "40x23": (897, 960), "37x29": (1072, 1080)}
#: (rows, threads, CTAs an SM): v42's grid and, for calls of several waves, fewer and larger
#: CTAs (16 x 512 x 4, 32 x 256 x 4) and more resident ones (16 x 256 x 8); fits() drops what
#: a range cannot build (the stage past 8 vectors, shared memory, threads).
SHAPES = ((8, 256, 6), (8, 384, 4), (8, 512, 4), (16, 256, 6), (16, 256, 8), (16, 320, 4),
          (16, 384, 4), (16, 512, 3), (16, 512, 4), (32, 256, 4), (32, 512, 2), (32, 576, 2),
          (32, 640, 2))
#: Batches timed per grid (8 heads; MB a call moves): 20x15 39-236 MB, 40x23 60-241 MB,
#: 37x29 70-281 MB: the sizes of the misses, and the first batch of each as the edge.
TIMED = {"20x15": "16,20,15;32,20,15;64,20,15;96,20,15",
         "40x23": "8,40,23;16,40,23;24,40,23;32,40,23",
         "37x29": "8,37,29;16,37,29;24,37,29;32,37,29"}


def band_candidates(config, n_range: tuple[int, int]) -> list[band.BandParams]:
    found = []
    for rows, threads, ctas in SHAPES:
        for fetch in (0, 128):
            params = band.BandParams(rows=rows, threads=threads, ctas_per_sm=ctas,
                                     min_n=n_range[0], max_n=n_range[1], min_numel=0,
                                     l2_fetch=fetch)
            if band.fits(config, params) is None:
                found.append(params)
    return found


def requests(grid: str) -> list[BuildRequest]:
    """The builds of directory ``f128_{grid}``: no band, then one forward candidate each."""
    config = next(c for c in PRESETS["tests"] if c.tag == TAG)
    tiled = _tuned_tiled_params(config)
    return [BuildRequest(config, "tiled", tiled, preferred=False, band_params=bands)
            for bands in [(), *((p,) for p in band_candidates(config, RANGES[grid]))]]


def main() -> int:
    if sys.argv[1] == "count":
        for grid in TIMED:
            print(f"f128_{grid}: {len(requests(grid))} builds, timed at {TIMED[grid]}")
        return 0
    root = sys.argv[2]
    jobs = int(sys.argv[sys.argv.index("-j") + 1]) if "-j" in sys.argv else 2
    for grid in TIMED:
        build_artifacts(requests(grid), f"{root}/f128_{grid}", ["sm_90"], jobs=jobs,
                        progress=True, keep_going=True, native=False, ptx=False)
        write_timed(root, grid)
    return 0


def write_timed(root: str, grid: str) -> None:
    """``grid``'s timed shapes beside its builds, for the device script's ``tune_dir``."""
    Path(f"{root}/f128_{grid}/timed.txt").write_text(TIMED[grid] + "\n")


if __name__ == "__main__":
    sys.exit(main())
