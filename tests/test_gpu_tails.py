"""GPU tests of the N-tail and misalignment variants: every ``(vec_kd, vec)`` kernel of the tiled
builds, reached through the launch rule by the shape (``N``) and by offsetting every view
(pointer alignment), bit-exact with the reference, canaries intact; the shifted kernels (16-byte
N-side vectors at any ``N``) at every ``N`` up to 300 and past a few tile edges; the issue's
rectangular and odd grids; an odd ``N`` past 2**31 elements (int64 with a scalar N side).

    PSA_TVM_ARTIFACTS=.artifacts python -m pytest -m gpu tests/test_gpu_tails.py
"""

from __future__ import annotations

import pytest
import torch

from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime.tuned import tuned_entry, tuned_shifted_entry
from tests.helpers import (
    DTYPES,
    bitwise_equal,
    inputs,
    poisoned,
    shifted_backward_at_aligned_n,
)
from tests.test_gpu import runtime_op

pytestmark = pytest.mark.gpu

CONFIGS = [OpConfig(32, nh, dtype) for nh in (4, 6) for dtype in DTYPES]
# (H, W) whose N = H*W has exactly this largest power-of-two divisor (up to 8).
GRID_FOR_WIDTH = {8: (40, 40), 4: (20, 15), 2: (18, 13), 1: (37, 29)}
# The grids: 640x480 (20x15), 1280x720 letterbox (40x23), odd maps, thin maps.
TAIL_GRIDS = ((20, 15), (20, 12), (40, 23), (37, 29), (1, 33), (64, 3))


def _view(shape, dtype, offset: int, seed: int) -> torch.Tensor:
    """Non-zero inputs at element ``offset`` of a fresh allocation (256-byte aligned)."""
    numel = 1
    for s in shape:
        numel *= s
    return inputs((offset + numel,), dtype, "cuda", seed)[offset:].view(shape)


def check_forward(op, config, batch, height, width, offset=0, seed=0):
    """Forward with every tensor at element ``offset``: returns the kernel that ran."""
    dtype = DTYPES[config.dtype]
    half = (batch * config.num_heads, height * width, config.key_dim)
    lo, hi = _view(half, dtype, offset, seed), _view(half, dtype, offset, seed + 1)
    out = poisoned((batch, config.channels, height, width), dtype, "cuda", 64 + offset)
    kernel = op.plan_forward([lo, hi], out.tensor, (height, width)).kernel
    op.launch_forward(lo, hi, out.tensor, torch.cuda.current_stream().cuda_stream,
                      (height, width))
    torch.cuda.synchronize()
    where = f"{config.tag} B={batch} {height}x{width} offset={offset} {kernel.entry}"
    assert bitwise_equal(out.tensor, reference.merge(lo, hi, config.num_heads, height, width)), \
        f"forward wrong: {where}"
    assert out.canaries_intact(), f"forward wrote outside its output: {where}"
    return kernel


def check_backward(op, config, batch, height, width, offset=0, seed=0):
    dtype = DTYPES[config.dtype]
    grad = _view((batch, config.channels, height, width), dtype, offset, seed)
    half = (batch * config.num_heads, height * width, config.key_dim)
    d_lo = poisoned(half, dtype, "cuda", 64 + offset)
    d_hi = poisoned(half, dtype, "cuda", 64 + offset)
    kernel = op.plan_backward(grad, [d_lo.tensor, d_hi.tensor]).kernel
    op.launch_backward(grad, d_lo.tensor, d_hi.tensor, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    where = f"{config.tag} B={batch} {height}x{width} offset={offset} {kernel.entry}"
    ref_lo, ref_hi = reference.merge_backward(grad, config.num_heads, config.key_dim)
    assert bitwise_equal(d_lo.tensor, ref_lo), f"backward d_lo wrong: {where}"
    assert bitwise_equal(d_hi.tensor, ref_hi), f"backward d_hi wrong: {where}"
    assert d_lo.canaries_intact() and d_hi.canaries_intact(), f"backward overran: {where}"
    return kernel


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.tag)
def test_every_int32_variant_is_reached_and_bit_exact(gpu_artifacts, config):
    """Each (vec_kd, vec) kernel: N chosen so vec is its widest legal N width, every view offset
    so max(vec, vec_kd) * itemsize is exactly the pointers' alignment."""
    op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, "tiled")
    itemsize = config.itemsize
    full = 16 // itemsize
    reached, listed = set(), set()
    for pass_, check in (("forward", check_forward), ("backward", check_backward)):
        # the build this op runs for the pass (a directory may hold others of the config)
        kernels = [k for k in op.builds[pass_].kernels
                   if k.pass_ == pass_ and k.index_dtype == "int32"]
        listed |= {k.entry for k in kernels}
        assert (16 // itemsize, 1) in {(k.vec_kd, k.vec) for k in kernels}, \
            "no kernel keeps 16-byte kd accesses for odd N"
        for kernel_spec in kernels:
            vec_kd, vec = kernel_spec.vec_kd, kernel_spec.vec
            alignment = max(vec_kd, vec) * itemsize
            offset = 0 if alignment == 16 else alignment // itemsize
            height, width = GRID_FOR_WIDTH[vec]
            if kernel_spec.max_n:  # a whole-row backward or a range kernel: one row in range
                height, width = 1, next(n for n in range(kernel_spec.min_n, kernel_spec.max_n + 1)
                                        if min(full, n & -n) == vec)
            # Small calls keep the plain kernels; shifted and band ones need min_numel elements.
            sized = kernel_spec.shifted or kernel_spec.band
            batches = (1, 3) if not sized else (
                -(-kernel_spec.min_numel // (config.channels * height * width)),)
            for batch in batches:
                kernel = check(op, config, batch, height, width, offset, seed=vec_kd + vec)
                assert (kernel.vec_kd, kernel.vec, kernel.shifted, kernel.band) == (
                    vec_kd, vec, kernel_spec.shifted, kernel_spec.band), (pass_, kernel.entry)
                reached.add(kernel.entry)
    # Kernels listed twice (a shifted backward with bwd_aligned, also at N % 8 == 0) count once.
    assert reached == listed
    assert any(k.shifted for b in op.builds.values() for k in b.kernels), "no shifted kernel"


# Every N to 300 (all of a tile's row shifts, heads and tails, N below one vector), then both
# sides of the shifted kernels' tile edges (16-bit: 256 forward, 248 backward; float32: 64,
# 124; halved for key_dim 128) and two odd grids.
SHIFTED_NS = [*range(1, 301), 371, 373, 495, 497, 511, 513, 743, 745, 1073, 1369]
SHIFTED_CONFIGS = [OpConfig(kd, nh, dtype) for kd, nh in ((32, 4), (16, 3), (128, 8))
                   for dtype in DTYPES]


@pytest.mark.parametrize("config", SHIFTED_CONFIGS, ids=lambda c: c.tag)
def test_shifted_kernels_at_every_n(gpu_artifacts, config):
    """The shifted kernels run wherever the N side would be under 8 bytes (a backward whose
    build sets ``bwd_aligned``: or N % 8 == 0) and the call has 2**21 merged elements or more
    (the batch is sized so, within the grid's 65535 slices), bit-exact with canaries around
    every output; just under that size the plain kernel runs."""
    op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, "tiled")
    full = 16 // config.itemsize
    ran = {"forward": 0, "backward": 0, "aligned backward": 0}
    has_aligned = shifted_backward_at_aligned_n(op.builds["backward"])
    for n in SHIFTED_NS:
        along_n = min(full, n & -n)
        narrow = along_n * config.itemsize < 8
        batch = min(-(-(1 << 21) // (config.channels * n)), 65535 // (2 * config.num_heads))
        large = batch * config.channels * n >= 1 << 21
        for pass_, check in (("forward", check_forward), ("backward", check_backward)):
            aligned = pass_ == "backward" and has_aligned and along_n == full
            kernel = check(op, config, batch, 1, n, seed=n)
            if kernel.band:  # a band forward's N range and size (tests/test_gpu_band.py)
                assert kernel.runs_at(n) and kernel.runs_for(batch * config.channels * n)
                continue
            assert kernel.shifted == ((narrow or aligned) and large), (n, pass_, kernel.entry)
            ran["aligned backward" if aligned else pass_] += kernel.shifted
            if (narrow or aligned) and large and batch > 1:
                kernel = check(op, config, batch - 1, 1, n, seed=n + 1)
                assert not kernel.shifted and kernel.vec == along_n, (n, pass_, kernel.entry)
    assert ran["forward"] > 0 and ran["backward"] > 0
    assert (ran["aligned backward"] > 0) == bool(has_aligned)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.tag)
def test_rectangular_and_odd_grids(gpu_artifacts, config):
    """The issue's grids at batch 1, 16 (and 64 for 20x15): 16-byte kd accesses throughout."""
    op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, "tiled")
    full = 16 // config.itemsize
    for height, width in TAIL_GRIDS:
        for batch in (1, 16, 64) if (height, width) == (20, 15) else (1, 16):
            n = height * width
            for check in (check_forward, check_backward):
                kernel = check(op, config, batch, height, width)
                vec = min(full, n & -n)
                # A backward with bwd_aligned: the shifted kernel at N % 8 == 0 too
                # (compiler/shifted.py).
                aligned = check is check_backward and vec == full and (
                    shifted_backward_at_aligned_n(op.builds["backward"]))
                shifted = (vec * config.itemsize < 8 or aligned) and (
                    batch * config.channels * n >= 1 << 21)
                assert kernel.vec_kd == full, kernel.entry
                if kernel.band:  # a band kernel's N range and size (tests/test_gpu_band.py)
                    assert kernel.runs_at(n) and kernel.runs_for(
                        batch * config.channels * n), kernel.entry
                    continue
                assert kernel.shifted == shifted, kernel.entry
                assert shifted or kernel.vec == vec, kernel.entry


# The configurations whose shipped table splits the shifted backward by call size.
SPLIT_CONFIGS = [c for c in (OpConfig(32, nh, d) for nh in (2, 4, 6) for d in DTYPES)
                 if ((entry := tuned_shifted_entry("sm_90", c)) is not None
                     and entry["params"].get("bwd_small_below"))]


@pytest.mark.parametrize("config", SPLIT_CONFIGS, ids=lambda c: c.tag)
def test_split_shifted_backward_on_both_sides_of_its_size(gpu_artifacts, config):
    """A split backward (compiler/shifted.py ``bwd_small_below``): the small-tile kernel from
    2**21 merged elements to just under the size, the main one from it on, at odd N, N % 8 == 0
    (the tiled kernel there unless the build sets ``bwd_aligned``) and a thin map; bit-exact
    with canaries on both sides."""
    op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, "tiled")
    below = tuned_shifted_entry("sm_90", config)["params"]["bwd_small_below"]
    has_aligned = shifted_backward_at_aligned_n(op.builds["backward"])
    ran = set()
    for height, width in ((37, 29), (40, 40), (40, 23), (25, 25), (1, 33)):
        per_batch = config.channels * height * width
        first_main = -(-below // per_batch)
        for batch in {-(-(1 << 21) // per_batch), first_main - 1, first_main, first_main + 1}:
            numel = batch * per_batch
            if numel < 1 << 21:
                continue
            kernel = check_backward(op, config, batch, height, width, seed=batch)
            if (height * width) % (16 // config.itemsize) == 0 and not has_aligned:
                assert not kernel.shifted, (height, width, batch, kernel.entry)
                continue
            small = kernel.entry.endswith("small_i32_kernel")
            assert kernel.shifted and small == (numel < below), (height, width, batch,
                                                                 kernel.entry)
            ran.add(small)
    assert ran == {True, False}


# The configurations whose shipped table gives the shifted backward a whole-row kernel by N.
WHOLE_CONFIGS = [c for c in (OpConfig(32, nh, d) for nh in (2, 4, 6) for d in DTYPES)
                 if ((entry := tuned_shifted_entry("sm_90", c)) is not None
                     and entry["params"].get("bwd_whole_tile_n"))]


@pytest.mark.parametrize("config", WHOLE_CONFIGS, ids=lambda c: c.tag)
def test_whole_row_backward_inside_and_outside_its_rows(gpu_artifacts, config):
    """A whole-row backward (compiler/shifted.py ``bwd_whole_tile_n``): its kernel, one CTA per
    row, where ``bwd_tile_n < N <= bwd_whole_tile_n`` (odd N and N % 8 == 0, both ends of the
    range; the tiled kernel where N % 8 == 0 unless the build sets ``bwd_aligned``), the main
    one just outside; bit-exact with canaries, at the smallest batch a shifted kernel runs and
    above it."""
    op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, "tiled")
    params = tuned_shifted_entry("sm_90", config)["params"]
    has_aligned = shifted_backward_at_aligned_n(op.builds["backward"])
    first, last = params["bwd_tile_n"] + 1, params["bwd_whole_tile_n"]
    ran = set()
    for height, width in ((20, 20), (21, 21), (17, 17), (1, first), (1, last), (1, first - 1),
                          (1, last + 1), (16, 31)):
        per_batch = config.channels * height * width
        for batch in (-(-(1 << 21) // per_batch), 64):
            kernel = check_backward(op, config, batch, height, width, seed=batch)
            if (height * width) % (16 // config.itemsize) == 0 and not has_aligned:
                assert not kernel.shifted, (height, width, batch, kernel.entry)
                continue
            whole = kernel.entry.endswith("whole_i32_kernel")
            assert kernel.shifted and whole == (first <= height * width <= last), (
                height, width, batch, kernel.entry)
            ran.add(whole)
    assert ran == {True, False}


# The configurations whose shipped table gives a tiled pass a range kernel by N.
RANGE_CASES = [(c, p) for c in (OpConfig(32, nh, d) for nh in (2, 4, 6) for d in DTYPES)
               for p in ("forward", "backward")
               if ((entry := tuned_entry("sm_90", p, c)) is not None
                   and entry["params"].get("range_max_n"))]


@pytest.mark.parametrize("config,pass_", RANGE_CASES,
                         ids=lambda v: v.tag if isinstance(v, OpConfig) else v)
def test_range_kernel_inside_and_outside_its_range(gpu_artifacts, config, pass_):
    """A tiled range kernel (``TiledParams.range_*``): it runs for ``range_min_n <= N <=
    range_max_n`` where ``N % vec == 0`` and the data is 16-byte aligned (both ends of the
    range, a YOLO square and a partial tile inside it), the plain kernels just outside it, at a
    narrower N side inside it and on an 8-byte aligned view; bit-exact with canaries, at
    batch 1 and 16."""
    op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, "tiled")
    params = tuned_entry("sm_90", pass_, config)["params"]
    first, last = params["range_min_n"], params["range_max_n"]
    full = 16 // config.itemsize
    check = check_forward if pass_ == "forward" else check_backward
    inside = [(1, first), (1, last), (40, 40), (1, first + full)]
    outside = [(1, first - full), (1, last + full), (1, first + full // 2)]
    ran = set()
    for (height, width), offset in [*((g, 0) for g in inside + outside), ((40, 40), full // 2)]:
        for batch in (1, 16):
            kernel = check(op, config, batch, height, width, offset, seed=batch + width)
            expected = (first <= height * width <= last and (height * width) % full == 0
                        and offset == 0)
            assert (kernel.max_n > 0) == expected, (height, width, offset, kernel.entry)
            ran.add(kernel.max_n > 0)
    assert ran == {True, False}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [1, 2, 3, 4, 5])
def test_misaligned_views_on_a_tail(gpu_artifacts, dtype, offset):
    """Element offsets 1-5 on N = 300: every narrower variant the alignment allows, exact."""
    config = OpConfig(32, 4, dtype)
    op = runtime_op(str(gpu_artifacts), 32, 4, dtype, "tiled")
    for check in (check_forward, check_backward):
        kernel = check(op, config, 2, 20, 15, offset)
        alignment = (offset * config.itemsize) & -(offset * config.itemsize)
        assert max(kernel.vec, kernel.vec_kd) * config.itemsize <= min(alignment, 16)


def test_odd_n_past_int32_uses_int64_with_a_scalar_n_side(gpu_artifacts):
    """511x511 (odd N), merged 2.2e9 elements: the int64 kernel with vec=1, vec_kd=4."""
    nh, kd, batch, height, width = 4, 32, 65, 511, 511
    config = OpConfig(kd, nh, "float16")
    op = runtime_op(str(gpu_artifacts), kd, nh, "float16", "tiled")
    n = height * width
    assert batch * nh * 2 * kd * n > 2**31
    lo = torch.empty(batch * nh, n, kd, dtype=torch.float16, device="cuda")
    hi = torch.empty_like(lo)
    lo.fill_(1.5)
    hi.fill_(-2.25)
    for t, seed in ((lo, 0), (hi, 1)):  # distinct values at both ends, past 2**31 included
        t.view(-1)[:1 << 20].copy_(inputs((1 << 20,), torch.float16, "cuda", seed))
        t.view(-1)[-(1 << 20):].copy_(inputs((1 << 20,), torch.float16, "cuda", seed + 2))
    out = torch.full((batch, config.channels, height, width), float("nan"),
                     dtype=torch.float16, device="cuda")
    plan = op.plan_forward([lo, hi], out, (height, width))
    assert (plan.kernel.index_dtype, plan.kernel.vec, plan.kernel.vec_kd) == ("int64", 1, 4)
    op.launch_forward(lo, hi, out, torch.cuda.current_stream().cuda_stream, (height, width))
    assert bitwise_equal(out, reference.merge(lo, hi, nh, height, width))
    lo.fill_(float("nan"))
    hi.fill_(float("nan"))
    op.launch_backward(out, lo, hi, torch.cuda.current_stream().cuda_stream)
    ref_lo, ref_hi = reference.merge_backward(out, nh, kd)
    assert bitwise_equal(lo, ref_lo) and bitwise_equal(hi, ref_hi)
