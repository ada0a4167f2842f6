"""v43: band-kernel candidates for ``N = 33`` (1x33) at key_dim 128 (8 heads), where v42's sweep
ran the shifted kernels at 1.10-1.33x a copy (40 calls, 16-bit forward and backward, float32
forward), as v41's ``b32`` did for float32 key_dim 32 (the ``v1k4`` kernels at 1.14-1.25 on an
H100; 32-row bands 1.008 forward, 1.011 backward).

    python bands43.py count
    python bands43.py build OUT_ROOT [-j 2]     # OUT_ROOT/b128_1x33

timed at :data:`TIMED` (``device3.sh``'s ``tune_dir`` line).

A band of ``rows`` rows at ``N = 33`` is ``rows * 33`` contiguous output elements, 16-byte
aligned for every rows the kernel takes; ``b32``'s grid (rows 8-32, 128-512 threads, 4-16 CTAs
an SM, forwards with and without the L2 fetch hint). Build 0 of each configuration has no band:
the shipped kernels at ``N = 33``, where none of its bands runs; each other build holds one
forward and one backward candidate and no other band (the kernels of a build are chosen by
pass, so they do not meet), every candidate from the first merged element, as v42's
``rank_bands42.py`` reads them.
float16 and float32 (bfloat16 moves float16's bytes in the same order).
"""

from __future__ import annotations

import itertools
import sys

from psa_tvm.compiler import band
from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
from psa_tvm.presets import PRESETS
from psa_tvm.tools.tune import _tuned_tiled_params

TAGS = ("kd128_nh8_float16", "kd128_nh8_float32")
BAND_N = 33
GRID = {"rows": (8, 16, 32), "threads": (128, 256, 512), "ctas_per_sm": (4, 8, 16),
        "l2_fetch": (0, 128)}
#: The shapes both dtypes were timed at (device3.sh): 16-bit 4.3-35 MB, float32 8.6-69 MB, the
#: sweep's 1x33 calls from 8 MB and the batch the bands start at (16).
TIMED = "16,1,33;32,1,33;64,1,33;128,1,33"


def band_candidates(config, pass_: str) -> list[band.BandParams]:
    found = []
    for rows, threads, ctas, fetch in itertools.product(*GRID.values()):
        if fetch and pass_ == "backward":
            continue
        params = band.BandParams(pass_=pass_, rows=rows, threads=threads, ctas_per_sm=ctas,
                                 min_n=BAND_N, max_n=BAND_N, min_numel=0, l2_fetch=fetch)
        if band.fits(config, params) is None:
            found.append(params)
    return found


def requests() -> list[BuildRequest]:
    out = []
    for config in (c for c in PRESETS["tests"] if c.tag in TAGS):
        tiled = _tuned_tiled_params(config)
        out.append(BuildRequest(config, "tiled", tiled, preferred=False, band_params=()))
        for pair in itertools.zip_longest(*(band_candidates(config, p) for p in band.PASSES)):
            out.append(BuildRequest(config, "tiled", tiled, preferred=False,
                                    band_params=tuple(p for p in pair if p)))
    return out


def main() -> int:
    if sys.argv[1] == "count":
        for config in (c for c in PRESETS["tests"] if c.tag in TAGS):
            print(config.tag, [len(band_candidates(config, p)) for p in band.PASSES])
        print(len(requests()), "builds, timed at", TIMED)
        return 0
    jobs = int(sys.argv[sys.argv.index("-j") + 1]) if "-j" in sys.argv else 2
    build_artifacts(requests(), f"{sys.argv[2]}/b128_1x33", ["sm_90"], jobs=jobs, progress=True,
                    keep_going=True, native=False, ptx=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
