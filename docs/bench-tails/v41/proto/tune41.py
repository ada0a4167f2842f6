"""v41: candidates for the key_dim 64 (2 heads) and 128 (8 heads) builds, which v40 found at
1.05-1.75x a copy (their tiled params from an early events-timed tune at 40x40, their shifted
kernels on defaults).

    python tune41.py count
    python tune41.py build OUT_ROOT [KINDS] [-j 2]   # OUT_ROOT/{t64,t128,s64,s128,s32,b32}

Tiled candidates (``t*``): the grid below, which adds what key_dim 32's tune found
(``group_pad_bytes`` 32, the forward's register stage with the coalesced order) to tiles and
thread counts that fit 48 KB of static shared memory; plus what the builds run now. float16
and float32 only: the 16-bit kernels of bfloat16 move the same bytes in the same order (their
key_dim 32 params are the same as float16's). The 16-bit key_dim 128 candidates are built with
``bwd_aligned = 0`` so that the tiled backward, not the shifted one, runs at aligned ``N``.
Shifted candidates (``s*``): ``psa_tvm.tools.tune.shifted_candidates`` as ``tune build
--shifted`` makes them; also for key_dim 32 at 4 heads (``s32``), whose shifted kernels
made most of v40's key_dim 32 misses at 37x29 (the other head counts share its params).
Band candidates (``b32``, :func:`band_candidates`): float32 key_dim 32 at ``N = 33``.
Built without PTX (``build_artifacts(ptx=False)``, as ``psa-tvm tune build`` now does); the
candidates of v41's call 1 were built before that flag and cut to their ELF by fat2cubin.py.
Small tiles (``t32``, :func:`small_tile_candidates`): the float16 key_dim 32 forward at 8-13 MB.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace

from psa_tvm.compiler import band, shifted
from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
from psa_tvm.compiler.rules import get_rule
from psa_tvm.presets import PRESETS
from psa_tvm.tools.tune import (
    _running_params,
    _tuned_tiled_params,
    candidates,
    shifted_candidates,
)

TAGS = {64: ("kd64_nh2_float16", "kd64_nh2_float32"),
        128: ("kd128_nh8_float16", "kd128_nh8_float32"),
        32: ("kd32_nh4_float16", "kd32_nh4_float32")}  # shifted only: v40's 37x29 misses
#: tools/tune.py's grid axes (fields of TiledParams); the register stage only with its
#: coalesced order (stage_loads == stage_coalesced), as key_dim 32's tune chose it.
GRID = {"tile_n": (64, 128, 256), "threads": (128, 256, 512), "row_threads": (4, 8),
        "pad_bytes": (16,), "group_pad_bytes": (0, 32), "stage_loads": (False, True),
        "stage_coalesced": (False, True)}


def configs(key_dim: int):
    return [c for c in PRESETS["tests"] if c.tag in TAGS[key_dim]]


def tiled_candidates(config) -> list:
    """``tune build --grid``'s candidates (what runs now first, then the valid grid points that
    fit 48 KB), without the uncoalesced stage."""
    running = _running_params(config)
    return [p for p in candidates(config, GRID)
            if p in running or p.stage_loads == p.stage_coalesced]


#: float32 ``N = 33`` (1x33), v40's worst key_dim 32 calls (the v1k4 forward at 1.29-1.36x a
#: copy): a band of ``rows`` rows is ``rows * 33`` contiguous output elements, 16-byte aligned.
BAND_N = 33
BAND_GRID = {"rows": (8, 16, 32), "threads": (128, 256, 512), "ctas_per_sm": (4, 8, 16),
             "l2_fetch": (0, 128)}


def band_candidates(config) -> list:
    """The build as it ships, then with one band kernel more for ``N = 33`` (forward or
    backward), from 2**18 merged elements."""
    base = band.default_params(config)
    found = [base]
    for pass_ in band.PASSES:
        for rows, threads, ctas, fetch in itertools.product(*BAND_GRID.values()):
            if fetch and pass_ == "backward":
                continue
            params = band.BandParams(pass_=pass_, rows=rows, threads=threads, ctas_per_sm=ctas,
                                     min_n=BAND_N, max_n=BAND_N, min_numel=1 << 18,
                                     l2_fetch=fetch)
            if band.fits(config, params) is None:
                found.append((*base, params))
    return found


#: (tile_n, threads) of the float16 key_dim 32 forward at small calls (``t32``): v40's 8-9 MB
#: misses of the 16-byte forward (1.10-1.15 at 20x20 and 20x12), whose 256-position tiles make
#: one wave of few CTAs there.
SMALL_TILES = ((256, 256), (128, 128), (128, 256), (64, 64), (64, 128), (128, 64))


def small_tile_candidates(config) -> list:
    """The shipped forward params with other full-width tiles (the narrow kernels' kept)."""
    rule = get_rule("tiled")
    base = _tuned_tiled_params(config)
    found = []
    for tile_n, threads in SMALL_TILES:
        params = replace(base, tile_n=tile_n, threads=threads)
        try:
            rule.check_params(config, params)
        except ValueError:
            continue
        found.append(params)
    return found


def requests(key_dim: int, kind: str) -> list:
    out = []
    if kind == "t" and key_dim == 32:
        config = next(c for c in PRESETS["tests"] if c.tag == "kd32_nh4_float16")
        return [BuildRequest(config, "tiled", p, preferred=False)
                for p in small_tile_candidates(config)]
    if kind == "b":
        config = next(c for c in PRESETS["tests"] if c.tag == "kd32_nh4_float32")
        return [BuildRequest(config, "tiled", _tuned_tiled_params(config), preferred=False,
                             band_params=p) for p in band_candidates(config)]
    for config in configs(key_dim):
        if kind == "t":
            base = shifted.default_params(config)
            no_aligned = replace(base, bwd_aligned=0) if base.bwd_aligned else None
            out += [BuildRequest(config, "tiled", p, preferred=False, shifted_params=no_aligned)
                    for p in tiled_candidates(config)]
        else:
            out += [BuildRequest(config, "tiled", _tuned_tiled_params(config), preferred=False,
                                 shifted_params=p) for p in shifted_candidates(config)]
    return out


def main() -> int:
    if sys.argv[1] == "count":
        for kd in TAGS:
            for kind in "tsb" if kd == 32 else "ts":
                print(kd, kind, len(requests(kd, kind)))
        return 0
    root = sys.argv[2]
    jobs = int(sys.argv[sys.argv.index("-j") + 1]) if "-j" in sys.argv else 2
    for kind in sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-j" else "ts":
        for kd in TAGS:
            if kind == "b" and kd != 32:
                continue
            build_artifacts(requests(kd, kind), f"{root}/{kind}{kd}", ["sm_90"], jobs=jobs,
                            progress=True, keep_going=True, native=False, ptx=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
