"""N tails and misaligned data, checked without a GPU: the decoupled access widths of the tiled
rule (``vec_kd`` along kd, ``vec`` along N) in the generated CUDA, the manifest records, and the
kernel choice at launch for every tail and alignment."""

from __future__ import annotations

import itertools
import re

import pytest

tvm = pytest.importorskip("tvm")

from psa_tvm.compiler import band  # noqa: E402
from psa_tvm.compiler.artifact import (  # noqa: E402
    BuildRequest,
    build_artifacts,
    schedule_module,
    variant_widths,
)
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers  # noqa: E402
from psa_tvm.compiler.lower import lower_cuda  # noqa: E402
from psa_tvm.config import OpConfig  # noqa: E402
from psa_tvm.runtime.manifest import Manifest, kernel_symbol  # noqa: E402
from psa_tvm.runtime.plan import choose_kernel  # noqa: E402
from tests.helpers import rule_n_side_bytes, shifted_backward_at_aligned_n  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
# Bytes of the CUDA types TVM prints for vector accesses of each element type.
VECTOR_BYTES = {"float4": 16, "uint4": 16, "float2": 8, "uint2": 8, "half4": 8,
                "nv_bfloat164": 8, "half2": 4, "nv_bfloat162": 4, "uint1": 4}
FLOOR_FIXUP = re.compile(r"\brmod\w*\b|\brdiv\w*\b|>=\s*(?:\(\w+\))?0\)\s*&&")
# Per pass: the tensors contiguous along kd (rows of lo/hi) and along N (rows of the merged one).
KD_SIDE = {"forward": ("lo_ptr", "hi_ptr"), "backward": ("dlo_ptr", "dhi_ptr")}
N_SIDE = {"forward": ("out_ptr",), "backward": ("g_ptr",)}


def kernel_bodies(source: str) -> dict[str, str]:
    kernels = {}
    head = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+(?:, \d+)?\) )?'
                      r"(\w+)\([^)]*\)\s*\{")
    for match in head.finditer(source):
        depth, i = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(source[i], 0)
            i += 1
        # A shifted kernel (compiler/shifted.py) reaches its tensors through flat views named
        # <tensor>_flat; the accesses are the same tensor's.
        kernels[match.group(1)] = source[match.end():i].replace("_flat_ptr", "_ptr")
    return kernels


def global_accesses(body: str, pointer: str) -> tuple[set[int], int]:
    """(byte widths of the vector accesses to ``pointer``, count of its scalar accesses)."""
    vector = {VECTOR_BYTES[t] for t in re.findall(rf"\*\((\w+)\*\)\({pointer}\b", body)}
    scalar = len(re.findall(rf"\b{pointer}\[", body))
    return vector, scalar


# ----------------------------------------------------------------------- variant set
def test_variant_widths_keep_the_kd_side_wide_for_every_n_width():
    assert variant_widths(8, "int32") == [(8, 8), (8, 4), (8, 2), (8, 1), (4, 4), (4, 1),
                                          (2, 2), (2, 1), (1, 1)]
    assert variant_widths(4, "int32") == [(4, 4), (4, 2), (4, 1), (2, 2), (2, 1), (1, 1)]
    # int64: the kd side is capped at 4 lanes, the N side (a plain ramp) is not.
    assert variant_widths(8, "int64") == [(4, 8), (4, 4), (4, 2), (4, 1), (2, 2), (2, 1),
                                          (1, 1)]
    assert variant_widths(1, "int32") == [(1, 1)]


def test_kernel_symbols_name_vec_kd_only_where_it_differs():
    assert kernel_symbol("forward", "tiled", 8, "int32") == "psa_merge_fwd_tiled_v8_i32"
    assert kernel_symbol("forward", "tiled", 8, "int32", 8) == "psa_merge_fwd_tiled_v8_i32"
    assert kernel_symbol("backward", "tiled", 2, "int64", 4) == "psa_merge_bwd_tiled_v2k4_i64"
    assert kernel_symbol("forward", "tiled", 1, "int32", 8, shifted=True) \
        == "psa_merge_fwd_tiled_s8_i32"
    assert kernel_symbol("backward", "tiled", 1, "int32", 8, shifted=True, small=True) \
        == "psa_merge_bwd_tiled_s8small_i32"


# ----------------------------------------------------------------------- generated CUDA
@pytest.fixture(scope="module", params=DTYPES)
def lowered(request):
    """Every tiled variant of kd=32, nh=4 lowered to CUDA (no nvcc needed)."""
    config = OpConfig(32, 4, request.param)
    scheduled = schedule_module(BuildRequest(config, "tiled"))
    module = lower_cuda({symbol: func for symbol, (_, func) in scheduled.items()})
    source = pack_16bit_gathers(module.source, config.dtype)
    variants = {module.kernels[symbol]["entry"]: variant
                for symbol, (variant, _) in scheduled.items()}
    return config, variants, kernel_bodies(source)


def test_every_variant_is_lowered(lowered):
    config, variants, bodies = lowered
    full = 16 // config.itemsize
    expected = {(p, i, kd, v, False) for p in ("forward", "backward") for i in ("int32", "int64")
                for kd, v in variant_widths(full, i)}
    # The shifted N side: int32, both passes.
    expected |= {(p, "int32", full, 1, True) for p in ("forward", "backward")}
    assert {(v.pass_, v.index_dtype, v.vec_kd, v.vec, v.shifted)
            for v in variants.values() if not v.band} == expected
    # A band kernel (compiler/band.py) per default params, int32, any N in its range.
    assert sorted((v.pass_, v.index_dtype, v.vec_kd, v.vec, v.n_range)
                  for v in variants.values() if v.band) == sorted(
        (p.pass_, "int32", full, 1, (p.min_n, p.max_n)) for p in band.default_params(config))
    assert set(variants) <= set(bodies)


def test_kd_side_keeps_its_width_whatever_the_n_side(lowered):
    """Rows of lo/hi are read (forward) or written (backward) vec_kd elements at a time: 16-byte
    LDG/STG for every int32 variant with the full kd width, N tails included."""
    config, variants, bodies = lowered
    itemsize, full = config.itemsize, 16 // config.itemsize
    wide = "float4" if config.dtype == "float32" else "uint4"
    for entry, variant in variants.items():
        body = bodies[entry]
        for pointer in KD_SIDE[variant.pass_]:
            vector, scalar = global_accesses(body, pointer)
            if variant.vec_kd == 1:
                assert not vector and scalar, (entry, pointer)
                continue
            assert scalar == 0, (entry, pointer, "scalar access on the kd side")
            assert vector == {variant.vec_kd * itemsize}, (entry, pointer, vector)
            if variant.index_dtype == "int32" and variant.vec_kd == full:
                assert re.search(rf"\*\({wide}\*\)\({pointer}\b", body), (entry, pointer)


def test_n_side_uses_the_widest_width_n_allows(lowered):
    config, variants, bodies = lowered
    for entry, variant in variants.items():
        body = bodies[entry]
        for pointer in N_SIDE[variant.pass_]:
            vector, scalar = global_accesses(body, pointer)
            if variant.shifted:  # 16-byte vectors for any N; each row's ends element-wise
                assert vector == {16} and scalar, (entry, pointer, vector, scalar)
            elif variant.band:  # whole bands, 16-byte aligned for any N: vectors only
                assert vector == {16} and not scalar, (entry, pointer, vector, scalar)
            elif variant.vec == 1:
                assert not vector and scalar, (entry, pointer)
            else:
                assert scalar == 0 and vector == {variant.vec * config.itemsize}, (
                    entry, pointer, vector, scalar)


def test_no_floor_div_fixups_in_any_variant(lowered):
    _, variants, bodies = lowered
    for entry in variants:
        found = FLOOR_FIXUP.findall(bodies[entry])
        assert not found, f"{entry}: floor-div/mod sign fix-ups {found[:3]}"


def test_the_tail_predicate_is_one_per_vector(lowered):
    """The N side's tail test compares whole vectors (``... < NV``), never per lane in a loop."""
    _, variants, bodies = lowered
    for entry, variant in variants.items():
        if variant.vec > 1:
            assert not re.search(r"for \(int\w* \w+_s = 0;", bodies[entry]), entry


# ----------------------------------------------------------------------- manifest + choice
@pytest.fixture(scope="module")
def tail_manifest(tmp_path_factory):
    out = tmp_path_factory.mktemp("tails")
    build_artifacts([BuildRequest(OpConfig(16, 2, dtype), "tiled") for dtype in
                     ("float32", "float16")], out, ["sm_90"])
    return Manifest.load(out)


def test_manifest_records_vec_kd(tail_manifest):
    raw = __import__("json").loads((tail_manifest.root / "manifest.json").read_text())
    for build in raw["builds"]:
        itemsize = ITEMSIZE[build["dtype"]]
        for kernel in build["kernels"]:
            assert kernel["vec_kd"] * itemsize <= 16 and kernel["vec"] * itemsize <= 16
            symbol = kernel_symbol(kernel["pass"], build["schedule"], kernel["vec"],
                                   kernel["index_dtype"], kernel["vec_kd"],
                                   shifted=kernel.get("shifted", False))
            assert kernel["entry"] == f"{symbol}_kernel"
            if kernel.get("shifted"):
                # Ranked just under an 8-byte N side, or (16-bit backward, listed twice) just
                # over the plain 16-byte kernel where N % 8 == 0.
                ranks = {1: 2 * (8 // itemsize) - 1, 16 // itemsize: 2 * (16 // itemsize) + 1}
                assert kernel["vec"] == 1 or (itemsize, kernel["pass"]) == (2, "backward")
                assert kernel["rank"] == ranks[kernel["vec"]], kernel["entry"]
                assert kernel["min_numel"] == 1 << 21, kernel["entry"]
    for build in tail_manifest.builds:
        for kernel in build.kernels:
            for arch_report in kernel.resources.values():
                assert arch_report["spill_stores"] == 0, kernel.entry


def _rule(kernels, n: int, alignment: int, itemsize: int) -> tuple[int, int, bool]:
    """The rule as docs/native.md states it, written independently of plan.py: the widest
    vec_kd, then the widest N side, a shifted kernel counting as between 8 and 4 bytes (its
    16-bit backward's second record, for N % 8 == 0: just over 16 bytes)."""
    fits = [(k.vec_kd, rule_n_side_bytes(k, itemsize), k.vec, k.shifted) for k in kernels
            if n % k.vec == 0 and alignment % (max(k.vec, k.vec_kd) * itemsize) == 0]
    best = max(fits)
    return best[0], best[2], best[3]


@pytest.mark.parametrize("n", [1600, 300, 1073, 920, 240, 33, 192, 6, 2, 1])
@pytest.mark.parametrize("alignment", [16, 8, 4, 2])
def test_kernel_choice_follows_the_rule(tail_manifest, n, alignment):
    for build, pass_, index_dtype in itertools.product(
            tail_manifest.builds, ("forward", "backward"), ("int32", "int64")):
        itemsize = build.config.itemsize
        if alignment % itemsize:
            continue
        kernels = [k for k in build.kernels if k.pass_ == pass_ and k.index_dtype == index_dtype]
        chosen = choose_kernel(build, pass_, n, index_dtype, alignment)
        assert (chosen.vec_kd, chosen.vec, chosen.shifted) == _rule(kernels, n, alignment,
                                                                    itemsize)


def test_tails_keep_16_byte_kd_accesses(tail_manifest):
    """The issue's shapes: N = 300 (20x15), 1073 (37x29), 920 (40x23), 33 (1x33); ``s``: the
    shifted kernel (16-byte N-side vectors at any N) where the N side would be under 8 bytes,
    and for a backward with ``bwd_aligned`` where N % 8 == 0 too (none at key_dim 16)."""
    expected = {"float16": {1600: (8, 8), 300: (8, 4), 920: (8, 8), 1073: (8, "s"), 33: (8, "s"),
                            240: (8, 8), 192: (8, 8), 6: (8, "s"), 1122: (8, "s")},
                "float32": {1600: (4, 4), 300: (4, 4), 920: (4, 4), 1073: (4, "s"),
                            33: (4, "s"), 240: (4, 4), 192: (4, 4), 6: (4, 2)}}
    for build in tail_manifest.builds:
        for n, (vec_kd, vec) in expected[build.config.dtype].items():
            for pass_ in ("forward", "backward"):
                kernel = choose_kernel(build, pass_, n, "int32", 16)
                got = (kernel.vec_kd, "s" if kernel.shifted else kernel.vec)
                aligned = shifted_backward_at_aligned_n(build)
                if pass_ == "backward" and aligned and vec == 16 // build.config.itemsize:
                    assert got == (8, "s") and kernel.vec == 8, (n, kernel.entry)
                    small = choose_kernel(build, pass_, n, "int32", 16, numel=(1 << 21) - 1)
                    assert (small.vec, small.shifted) == (8, False), (n, small.entry)
                    continue
                assert got == (vec_kd, vec), (build.config.dtype, n, pass_)
        # Calls under 2**21 merged elements keep the plain kernels (their CTAs are smaller).
        for pass_ in ("forward", "backward"):
            kernel = choose_kernel(build, pass_, 1073, "int32", 16, numel=(1 << 21) - 1)
            assert (kernel.vec, kernel.shifted) == (1, False)
            kernel = choose_kernel(build, pass_, 1073, "int32", 16, numel=1 << 21)
            assert kernel.shifted
        # 8-byte-aligned data: 8-byte accesses on both sides where N allows.
        kernel = choose_kernel(build, "forward", 300, "int32", 8)
        assert (kernel.vec_kd, kernel.vec) == ((4, 4) if build.config.itemsize == 2 else (2, 2))


def _native_plans_match(root, config: OpConfig, pass_: str, calls) -> dict:
    """For each ``(batch, N)`` call of ``pass_``: the native library's kernel, grid and block
    equal the RuntimeOp's (skips without g++). Returns the RuntimeOp's entry per call."""
    import shutil

    import torch

    from psa_tvm.runtime import native as native_rt
    from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp

    if shutil.which("g++") is None or (lib := native_rt.load(root)) is None:
        pytest.skip("no native library (g++)")
    dtype = getattr(torch, config.dtype)
    op = PsaMergeAttnRuntimeOp(config.key_dim, config.num_heads, config.dtype, artifacts=root,
                               arch="sm_90")
    entries = {}
    for batch, n in calls:
        merged = torch.empty(batch, config.channels, n, 1, dtype=dtype)
        halves = [torch.empty(batch * config.num_heads, n, config.key_dim, dtype=dtype)
                  for _ in range(2)]
        if pass_ == "forward":
            plan = op.plan_forward(halves, merged)
            native = lib.plan_forward(*halves, merged, "sm_90")
        else:
            plan = op.plan_backward(merged, halves)
            native = lib.plan_backward(merged, *halves, "sm_90")
        entry, grid, block, *_ = native
        assert (entry, tuple(grid), tuple(block)) == (plan.kernel.entry, plan.grid,
                                                      plan.block), (batch, n)
        entries[batch, n] = plan.kernel.entry
    return entries


def test_split_shifted_backward_runs_its_small_kernel_below_the_size(tmp_path):
    """A build with ``bwd_small_below``: a second shifted backward (its own symbol, tile and
    threads) runs from 2**21 merged elements up to that size, the main one from it on, both
    for odd N and (second records) N % 8 == 0; the forward and the plain kernels are
    unchanged. The native library chooses the same kernels as runtime/plan.py."""
    from dataclasses import replace

    from psa_tvm.compiler import shifted

    config = OpConfig(16, 2, "float16")  # merged elements: 64 * B * N
    base = replace(shifted.default_params(config), bwd_aligned=1)  # N % 8 == 0 records too
    small = replace(base, bwd_tile_n=56, bwd_threads=128)
    below = 1 << 22
    params = shifted.split_backward(base, small, below)
    assert shifted.small_backward(params) == small and shifted.small_backward(base) is None
    # the small kernel keeps what it was timed with, its edge-first flag included
    early = replace(small, bwd_edge_first=1)
    assert shifted.small_backward(shifted.split_backward(base, early, below)) == early
    assert shifted.fits(config, params) is None
    assert "bwd_small_below" in shifted.fits(config, replace(params, bwd_small_below=1 << 21))
    assert "small-call backward" in shifted.fits(config, replace(params, bwd_small_tile_n=60))
    request = BuildRequest(config, "tiled", shifted_params=params)
    assert request.stem != BuildRequest(config, "tiled").stem
    build_artifacts([request], tmp_path, ["sm_90"])
    (build,) = Manifest.load(tmp_path).builds
    records = sorted((k.entry, k.vec, k.rank, k.min_numel) for k in build.kernels if k.shifted)
    main_bwd, small_bwd = "psa_merge_bwd_tiled_s8_i32_kernel", \
        "psa_merge_bwd_tiled_s8small_i32_kernel"
    assert records == sorted([("psa_merge_fwd_tiled_s8_i32_kernel", 1, 7, 1 << 21),
                              (main_bwd, 1, 7, below), (main_bwd, 8, 17, below),
                              (small_bwd, 1, 7, 1 << 21), (small_bwd, 8, 17, 1 << 21)])
    blocks = {k.entry: k.launch_dims(k.bind_symbols({"g": (64, 2, 2, 16, 1073),
                                                    "dlo": (128, 1073, 16),
                                                    "dhi": (128, 1073, 16)}))
              for k in build.kernels if k.shifted and k.pass_ == "backward"}
    assert blocks[small_bwd][1][0] == 128 and blocks[main_bwd][1][0] == 256
    # more CTAs for the same call: 56 positions each instead of 248
    assert blocks[small_bwd][0][0] * blocks[small_bwd][0][1] >= \
        4 * blocks[main_bwd][0][0] * blocks[main_bwd][0][1]
    cases = {1073: ((8, None), (40, small_bwd), (61, small_bwd), (62, main_bwd), (64, main_bwd)),
             1600: ((8, None), (24, small_bwd), (40, small_bwd), (41, main_bwd), (64, main_bwd))}
    for n, by_batch in cases.items():
        for batch, entry in by_batch:
            numel = 64 * batch * n
            kernel = choose_kernel(build, "backward", n, "int32", 16, numel)
            assert (kernel.entry if kernel.shifted else None) == entry, (n, batch, kernel.entry)
            assert choose_kernel(build, "forward", n, "int32", 16, numel).shifted == (
                n == 1073 and numel >= 1 << 21)
    assert choose_kernel(build, "backward", 1073, "int32", 16).entry == main_bwd  # any size

    _native_plans_match(tmp_path, config, "backward",
                        ((8, 1073), (40, 1073), (64, 1073), (40, 1600), (64, 1600)))


def test_whole_row_backward_runs_where_n_fits_its_tile_and_not_the_main_one(tmp_path):
    """A build with ``bwd_whole_tile_n``: a third shifted backward (its own symbol, tile and
    threads) runs for ``bwd_tile_n < N <= bwd_whole_tile_n`` at any size from 2**21 merged
    elements, ahead of a split's small and main kernels, both for odd N and (second records)
    N % 8 == 0; outside that range the build chooses as without it. The native library
    chooses the same kernels as runtime/plan.py."""
    from dataclasses import replace

    from psa_tvm.compiler import shifted
    from psa_tvm.runtime.tuned import shifted_record

    config = OpConfig(16, 2, "float16")  # merged elements: 64 * B * N
    base = replace(shifted.default_params(config), bwd_aligned=1)  # N % 8 == 0 records too
    assert base.bwd_tile_n == 248
    whole = replace(base, bwd_tile_n=504, bwd_threads=512, bwd_edge_first=1)
    split = shifted.split_backward(base, replace(base, bwd_tile_n=56, bwd_threads=128), 1 << 22)
    params = shifted.with_whole_backward(split, whole)
    assert shifted.whole_backward(params) == whole and shifted.whole_backward(base) is None
    assert shifted.small_backward(params).bwd_whole_tile_n == 0
    assert shifted.whole_backward_rows(params) == (249, 504)
    assert shifted.fits(config, params) is None
    assert "bwd_whole_tile_n" in shifted.fits(config, replace(params, bwd_whole_tile_n=248))
    assert "whole-row backward" in shifted.fits(config, replace(params, bwd_whole_tile_n=500))
    # records name the whole-row fields only where there is one: older records stay equal
    assert not any(k.startswith("bwd_whole_") for k in shifted.as_record(split))
    assert shifted.as_record(params)["bwd_whole_edge_first"] == 1
    assert shifted_record(shifted.as_record(params)) == shifted.as_record(params)
    request = BuildRequest(config, "tiled", shifted_params=params)
    assert request.stem != BuildRequest(config, "tiled", shifted_params=split).stem
    build_artifacts([request], tmp_path, ["sm_90"])
    (build,) = Manifest.load(tmp_path).builds
    main_bwd, small_bwd, whole_bwd = (f"psa_merge_bwd_tiled_s8{extra}_i32_kernel"
                                      for extra in ("", "small", "whole"))
    records = sorted((k.entry, k.vec, k.rank, k.min_numel, k.min_n, k.max_n)
                     for k in build.kernels if k.shifted and k.pass_ == "backward")
    assert records == sorted([(main_bwd, 1, 7, 1 << 22, 0, 0), (main_bwd, 8, 17, 1 << 22, 0, 0),
                              (small_bwd, 1, 7, 1 << 21, 0, 0), (small_bwd, 8, 17, 1 << 21, 0, 0),
                              (whole_bwd, 1, 7, 1 << 21, 249, 504),
                              (whole_bwd, 8, 17, 1 << 21, 249, 504)])
    (whole_spec,) = [k for k in build.kernels if k.entry == whole_bwd and k.vec == 1]
    grid, block = whole_spec.launch_dims(whole_spec.bind_symbols(
        {"g": (64, 2, 2, 16, 400), "dlo": (128, 400, 16), "dhi": (128, 400, 16)}))
    assert grid[0] == 1 and block[0] == 512  # one CTA per row
    # (N, batch) -> the shifted backward that runs (None: a plain kernel, under 2**21)
    cases = {(400, 96): whole_bwd, (400, 256): whole_bwd, (249, 160): whole_bwd,
             (504, 80): whole_bwd, (400, 64): None, (248, 160): small_bwd, (248, 512): main_bwd,
             (505, 80): small_bwd, (505, 160): main_bwd, (1073, 64): main_bwd,
             (1600, 24): small_bwd, (425, 80): whole_bwd}
    for (n, batch), entry in cases.items():
        kernel = choose_kernel(build, "backward", n, "int32", 16, 64 * batch * n)
        assert (kernel.entry if kernel.shifted else None) == entry, (n, batch, kernel.entry)
    assert choose_kernel(build, "backward", 400, "int32", 16).entry == whole_bwd  # any size
    assert choose_kernel(build, "backward", 1600, "int32", 16).entry == main_bwd
    assert not any(k.max_n for k in build.kernels if k.pass_ == "forward")

    _native_plans_match(tmp_path, config, "backward", [(batch, n) for n, batch in cases])


def test_range_kernel_runs_where_n_is_in_its_range(tmp_path):
    """A tiled build with ``range_*`` params: one more full-width int32 kernel per pass (its
    own symbol, tile and threads) that runs for ``range_min_n <= N <= range_max_n``, ahead of
    the plain 16-byte kernel; outside the range, at other widths and in int64 the build runs
    as without it. Bit-exact in the CPU emulation at N in the range with a partial tile; the
    native library chooses as runtime/plan.py; params without a range keep their digests."""
    from dataclasses import replace

    import torch

    from psa_tvm.compiler.compute import merge_forward
    from psa_tvm.compiler.rules import get_rule
    from psa_tvm.compiler.rules.base import params_as_dict
    from psa_tvm.compiler.rules.tiled import TiledParams
    from psa_tvm.reference import merge as merge_reference
    from tests.helpers import bitwise_equal, inputs
    from tests.test_tiled_slices import EMULATED, emulate

    rule = get_rule("tiled")
    config = OpConfig(32, 2, "float16")
    main = TiledParams(tile_n=256, threads=256, row_threads=4, stage_loads=True,
                       stage_coalesced=True, group_pad_bytes=32, narrow_tile_n=64,
                       narrow_threads=128)
    params = replace(main, range_min_n=1024, range_max_n=2048, range_tile_n=128,
                     range_threads=128)
    assert params.for_range() == replace(main, tile_n=128, threads=128)
    assert params.for_variant(2, 4) == main.for_variant(2, 4)  # no range in narrow kernels
    assert rule.range_kernel(main) is None
    assert rule.range_kernel(params) == ((1024, 2048), replace(main, tile_n=128, threads=128))
    assert not any(k.startswith("range_") for k in params_as_dict(main))  # older digests
    assert BuildRequest(config, "tiled", params).stem != BuildRequest(config, "tiled", main).stem
    for bad, match in ((replace(params, range_min_n=0), "1 <= range_min_n <= range_max_n"),
                       (replace(params, range_min_n=4096), "1 <= range_min_n <= range_max_n"),
                       (replace(params, range_tile_n=256, range_threads=256),
                        "main kernel's tile"),
                       (replace(params, range_tile_n=100), "tile_n=100")):
        with pytest.raises(ValueError, match=match):
            rule.check_params(config, bad)

    symbol = kernel_symbol("forward", "tiled", 8, "int32", 8, n_range=(1024, 2048))
    assert symbol == "psa_merge_fwd_tiled_v8n1024to2048_i32"
    scheduled = schedule_module(BuildRequest(config, "tiled", params))
    assert scheduled[symbol][0].n_range == (1024, 2048)
    assert [s for s in scheduled if "n1024to2048" in s] == [
        symbol, "psa_merge_bwd_tiled_v8n1024to2048_i32"]
    # the range kernel's schedule in the emulation's form (the register stage's nests apart)
    kernel = emulate(EMULATED.apply(merge_forward(config, vec=8, name="f"), "forward", config,
                                    params.for_range(), 8, 8))
    for n in (1032, 1600):  # 1032 = 8 tiles of 128 + 8 positions
        lo, hi = (inputs((6, n, 32), torch.float16, "cpu", seed=i) for i in range(2))
        out = torch.full((3, 2, 2, 32, n), float("nan"), dtype=torch.float16)
        kernel(lo, hi, out, n // 8)
        assert bitwise_equal(out.reshape(3, 128, n, 1),
                             merge_reference(lo, hi, 2, n, 1)), n

    build_artifacts([BuildRequest(config, "tiled", params)], tmp_path, ["sm_90"])
    (build,) = Manifest.load(tmp_path).builds
    assert build.schedule_params == params_as_dict(params)
    entry = f"{symbol}_kernel"
    (spec,) = [k for k in build.kernels if k.entry == entry]
    assert (spec.vec, spec.vec_kd, spec.rank, spec.min_n, spec.max_n) == (8, 8, 16, 1024, 2048)
    grid, block = spec.launch_dims(spec.bind_symbols(
        {"lo": (32, 1600, 32), "hi": (32, 1600, 32), "out": (16, 2, 2, 32, 1600)}))
    assert grid[0] == 13 and block[0] == 128  # ceil(1600 / 128) tiles of 128 positions
    plain = "psa_merge_fwd_tiled_v8_i32_kernel"
    cases = {1024: entry, 1600: entry, 2048: entry, 1016: plain, 2056: plain, 400: plain,
             1028: "psa_merge_fwd_tiled_v4k8_i32_kernel"}
    for n, expected in cases.items():
        assert choose_kernel(build, "forward", n, "int32", 16, 16 * 128 * n).entry == expected, n
    assert choose_kernel(build, "forward", 1600, "int64", 16).entry.endswith("_i64_kernel")
    assert choose_kernel(build, "forward", 1600, "int32", 8).entry != entry  # 8-byte aligned

    ran = _native_plans_match(tmp_path, config, "forward", [(16, n) for n in cases])
    assert ran == {(16, n): entry for n, entry in cases.items()}


@pytest.mark.parametrize("edge_first", [0, 1])
def test_edge_first_backward_loads_its_edges_before_the_tile(edge_first):
    """``bwd_edge_first``: an edge tile's element-wise head and tail loads come before the
    tile's 16-byte loads (so both are in flight at once) and reach shared memory after them;
    without it they follow the vector loads."""
    from dataclasses import replace

    from psa_tvm.compiler import shifted

    config = OpConfig(32, 4, "float16")
    params = replace(shifted.default_params(config), bwd_edge_first=edge_first)
    symbol = kernel_symbol("backward", "tiled", 1, "int32", 8, shifted=True)
    func = schedule_module(BuildRequest(config, "tiled", shifted_params=params))[symbol][1]
    body = kernel_bodies(lower_cuda({symbol: func}).source)[f"{symbol}_kernel"]
    first_vector_load = body.index("*(uint4*)(g_ptr")
    first_scalar_load = body.index("= g_ptr[")
    assert (first_scalar_load < first_vector_load) == bool(edge_first)
    assert ("heads_ptr[0] = g_ptr[" in body) == bool(edge_first)


# ----------------------------------------------------------------------- CPU
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_forward_vector_kernel_and_tails_are_exact(dtype):
    """The CPU library's kernels on N tails and on misaligned views, bit-exact; d_lo/d_hi exact
    too. kd=32 is a whole number of 128-bit lanes, so the library holds the ``cpu_shuffle``
    register-tile kernels alone (any N, any element-aligned view): no vec or pair kernels."""
    import torch

    import psa_tvm
    from psa_tvm import reference
    from psa_tvm.runtime.cpu import cpu_kernels

    config = OpConfig(32, 2, dtype)
    kernels = cpu_kernels(config)
    assert kernels.library.forward_vec == 1 and kernels.forward_vec_fn is None
    assert kernels.library.pairs_forward_vec == 0 and not kernels.library.pairs_backward
    assert kernels.pairs_forward_fn is None and kernels.pairs_backward_fn is None
    import tvm_ffi

    tvm_ffi.load_module(str(kernels.library.path))["psa_tvm_own_pool"]()  # cpu_pool.cc's switch
    tdt = getattr(torch, dtype)
    for batch, height, width in ((2, 40, 40), (3, 37, 29), (1, 20, 15), (2, 1, 33), (1, 64, 3),
                                 (2, 3, 2)):
        n = height * width
        base = torch.randn(2 * batch * 2 * n * 32 + 1).to(tdt)
        base[base == 0] = 1
        lo = base[1:1 + batch * 2 * n * 32].view(batch * 2, n, 32)  # element-aligned view
        hi = base[-batch * 2 * n * 32:].view(batch * 2, n, 32)
        for a, b in ((lo, hi), (lo.clone(), hi)):  # misaligned, then aligned lo
            merged = psa_tvm.merge(a, b, 2, height, width)
            assert torch.equal(merged, reference.merge(a, b, 2, height, width)), (dtype, n)
            d_lo, d_hi = psa_tvm.merge_backward(merged, 2, 32)
            assert torch.equal(d_lo, a) and torch.equal(d_hi, b), (dtype, n)
            views = psa_tvm.merge_backward(merged[:, :, :, :], 2, 32,
                                           d_lo=torch.empty_like(base)[1:1 + a.numel()].view(
                                               a.shape), d_hi=torch.empty_like(b))
            assert torch.equal(views[0], a) and torch.equal(views[1], b), (dtype, n)
