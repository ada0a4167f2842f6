"""v42: band-kernel candidates for the key_dim 64 (2 heads) and 128 (8 heads) builds at the
N tails where their shifted and 8-byte tiled kernels ran 1.1-1.8x a copy in v40's sweep
(37x29, N = 1073: the shifted ``s8``/``s4`` kernels; 20x15, N = 300: ``v4k8``/``v4``).

    python bands42.py count
    python bands42.py build OUT_ROOT [-j 2]     # OUT_ROOT/b{64,128}_{37x29,20x15}

The band kernels (``psa_tvm.compiler.band``) are generic in key_dim: a ``(b, h, s)`` block has
``key_dim / rows`` bands instead of 32's, the shared tile and the register stage depend on
``rows`` and ``N`` only. So the candidates are key_dim 32's winners and their neighbours
(docs/perf.md v26-v37): rows 8-32, 256-640 threads, 2-6 CTAs an SM, forwards with and without
the L2 fetch hint (a 16-bit 16-row band of key_dim 64 reads 32 of each position's 128 input
bytes, as a float32 8-row band of key_dim 32 does, where the hint took 1.08x to 1.01x).

Every candidate runs from the first merged element (``min_numel`` 0) so that it is what runs
at every timed shape of its ``N`` range; which call sizes each should own is read off the
timings (``rank_bands42.py``), as key_dim 32's split was. A directory per key_dim and range,
timed at that range's shapes only; one build holds a forward and a backward candidate (the
kernels of a build are chosen by pass, so they do not meet): half the builds. Build 0 of each
configuration has no band: the shipped kernels. float16 and float32 only (bfloat16 moves
float16's bytes in the same order).
"""

from __future__ import annotations

import sys
from itertools import zip_longest

from psa_tvm.compiler import band
from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
from psa_tvm.presets import PRESETS
from psa_tvm.tools.tune import _tuned_tiled_params

TAGS = {64: ("kd64_nh2_float16", "kd64_nh2_float32"),
        128: ("kd128_nh8_float16", "kd128_nh8_float32")}
#: The N ranges of key_dim 32's bands at these grids (band._TAIL_N, band._20X15_N, the 16-bit
#: forward's 897-960 around 40x23); 40x23 in 16-bit types only, whose tiled 16-byte kernels
#: ran 1.15 and 1.27 (forwards, key_dim 64 and 128) by v40's sweep median there, and 1.22 and
#: 1.11 (backwards; 128's the aligned shifted one). float32's there: key_dim 64 at 1.05-1.08,
#: key_dim 128 at 1.12-1.28 on the 16-byte tiled kernel, which v41's candidates retune.
RANGES = {"37x29": (1072, 1080), "20x15": (297, 303), "40x23": (897, 960)}
SIXTEEN_BIT_ONLY = ("40x23",)
#: (rows, threads, CTAs an SM): key_dim 32's winners (8 x 512 x 4, 16 x 512 x 3, 16 x 320 x 4,
#: 16 x 384 x 4, 8/16 x 256 x 6, 32 x 512 x 2, 32 x 576/640 x 2) and neighbours; fits() drops
#: what a dtype or range cannot build (the stage past 8 vectors, shared memory, threads).
SHAPES = ((8, 256, 6), (8, 384, 4), (8, 512, 4), (16, 256, 6), (16, 320, 4), (16, 384, 4),
          (16, 512, 3), (32, 512, 2), (32, 576, 2), (32, 640, 2))
#: Shapes timed per key_dim and range (16-bit sizes 8-300 MB, float32 twice): 37x29 at
#: s64's/s128's batches and 20x15 at t64's/t128's and beside, so that v41's call 1 times the
#: retuned shifted and tiled kernels at the same shapes.
TIMED = {(64, "37x29"): "8,37,29;32,37,29;96,37,29", (64, "20x15"): "32,20,15;64,20,15;128,20,15",
         (64, "40x23"): "16,40,23;48,40,23;128,40,23",
         (128, "37x29"): "1,37,29;4,37,29;12,37,29", (128, "20x15"): "4,20,15;8,20,15;16,20,15",
         (128, "40x23"): "2,40,23;6,40,23;16,40,23"}


def band_candidates(config, pass_: str, n_range: tuple[int, int]) -> list[band.BandParams]:
    found = []
    for rows, threads, ctas in SHAPES:
        for fetch in ((0, 128) if pass_ == "forward" else (0,)):
            params = band.BandParams(pass_=pass_, rows=rows, threads=threads,
                                     ctas_per_sm=ctas, min_n=n_range[0], max_n=n_range[1],
                                     min_numel=0, l2_fetch=fetch)
            if band.fits(config, params) is None:
                found.append(params)
    return found


def requests(key_dim: int, grid: str) -> list[BuildRequest]:
    """The builds of directory ``b{key_dim}_{grid}``: the shipped kernels, then each a forward
    and a backward band candidate of ``grid``'s ``N`` range."""
    out = []
    for config in (c for c in PRESETS["tests"] if c.tag in TAGS[key_dim]):
        if grid in SIXTEEN_BIT_ONLY and config.itemsize != 2:
            continue
        tiled = _tuned_tiled_params(config)
        lists = [band_candidates(config, pass_, RANGES[grid]) for pass_ in band.PASSES]
        out.append(BuildRequest(config, "tiled", tiled, preferred=False, band_params=()))
        for pair in zip_longest(*lists):
            out.append(BuildRequest(config, "tiled", tiled, preferred=False,
                                    band_params=tuple(p for p in pair if p is not None)))
    return out


def main() -> int:
    if sys.argv[1] == "count":
        for kd, grid in TIMED:
            print(f"b{kd}_{grid}: {len(requests(kd, grid))} builds, timed at {TIMED[kd, grid]}")
        return 0
    root = sys.argv[2]
    jobs = int(sys.argv[sys.argv.index("-j") + 1]) if "-j" in sys.argv else 2
    for kd, grid in TIMED:
        build_artifacts(requests(kd, grid), f"{root}/b{kd}_{grid}", ["sm_90"], jobs=jobs,
                        progress=True, keep_going=True, native=False, ptx=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
