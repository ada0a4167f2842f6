"""GPU tests of the band kernels (psa_tvm/compiler/band.py), forwards and backwards: each
kernel runs exactly inside its ``N`` range and its call sizes (from ``min_numel``, up to
``max_numel`` where set), with 16-byte aligned data, and is bit-exact with canaries intact at
both ends of both ranges, odd and even ``N``, calls just past its sizes (each CTA one or two
bands) and the issue's grids that it serves.

    PSA_TVM_ARTIFACTS=.artifacts python -m pytest -m gpu tests/test_gpu_band.py
"""

from __future__ import annotations

import pytest
import torch

from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime import native as native_rt
from tests.helpers import DTYPES, bitwise_equal, inputs, poisoned
from tests.test_gpu import runtime_op
from tests.test_gpu_tails import check_backward, check_forward

pytestmark = pytest.mark.gpu

CONFIGS = [OpConfig(32, nh, dtype) for nh in (2, 4, 6) for dtype in DTYPES]
#: The test matrix's other key dims with bands (v42): forwards in every dtype, backwards in
#: float32 only (band.default_params; this module runs without TVM, so the list is literal:
#: tests/test_band.py checks it against default_params).
OTHER_CONFIGS = [OpConfig(kd, nh, dtype) for kd, nh in ((64, 2), (128, 8)) for dtype in DTYPES]
CHECKS = {"forward": check_forward, "backward": check_backward}
#: (config, pass) of every build with band kernels of that pass: at key_dim 32 every dtype has
#: band backwards (float32's at N = 33 only, v43), at 64 and 128 only float32 has one.
CASES = [(c, p) for c in CONFIGS for p in CHECKS] + [
    (c, p) for c in OTHER_CONFIGS for p in CHECKS if p == "forward" or c.itemsize == 4]


def _case_id(case) -> str:
    config, pass_ = case
    return f"{config.tag}-{pass_}"


def _op(gpu_artifacts, config: OpConfig):
    return runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, "tiled")


def _bands(op, pass_: str = "forward"):
    bands = [k for k in op.builds[pass_].kernels if k.band and k.pass_ == pass_]
    assert bands, f"no band {pass_} in the build"
    return bands


def _batches(kernel, config: OpConfig, n: int) -> tuple[int, int]:
    """The smallest and the largest batch whose call the kernel's size range holds at ``N``."""
    per_batch = config.channels * n
    first = -(-kernel.min_numel // per_batch)
    return first, kernel.max_numel // per_batch if kernel.max_numel else 2 * first + 1


def _runs_band(kernel, config: OpConfig, batch: int, n: int) -> bool:
    return kernel.runs_at(n) and kernel.runs_for(batch * config.channels * n)


@pytest.mark.parametrize(("config", "pass_"), CASES, ids=map(_case_id, CASES))
def test_band_kernel_inside_and_outside_its_ranges(gpu_artifacts, config, pass_):
    op = _op(gpu_artifacts, config)
    for band in _bands(op, pass_):
        middle = (band.min_n + band.max_n) // 2
        ran = 0
        for n in (band.min_n - 1, band.min_n, band.min_n + 1, middle | 1, middle & ~3,
                  band.max_n, band.max_n + 1):
            first, last = _batches(band, config, n)
            for batch in sorted({max(first - 1, 1), first, last, last + 1}):
                kernel = CHECKS[pass_](op, config, batch, 1, n, seed=n + batch)
                inside = _runs_band(band, config, batch, n)
                assert (kernel.entry == band.entry) == inside, (n, batch, kernel.entry)
                ran += inside
        assert ran >= 8, band.entry


@pytest.mark.parametrize(("config", "pass_"), CASES, ids=map(_case_id, CASES))
def test_band_kernel_needs_16_byte_aligned_data(gpu_artifacts, config, pass_):
    """A view 8 bytes off (or 4): the 16-byte band accesses cannot run, the narrower kernels
    do."""
    op = _op(gpu_artifacts, config)
    for band in _bands(op, pass_):
        batch = _batches(band, config, band.max_n)[0]
        kernel = CHECKS[pass_](op, config, batch, 1, band.max_n,
                               offset=8 // config.itemsize, seed=3)
        assert kernel.entry != band.entry and kernel.vec_kd < 16 // config.itemsize


# The issue's grids at a band range: 1280x720 letterbox (40x23), 48x19 / 32x29, 37x29, 640x480
# (20x15) and YOLO11x's 20x20 at 640 px for 16-bit, 20x15 and 37x29 for float32 and 8x37
# (N = 296) just outside its range; at batch 16, 32 and 64, and for 37x29, 40x23 (the 16-bit
# backward's), 20x15 and 20x20 the batches between and around the call sizes where the kernels
# of one range split the calls at 2, 4 and 6 heads (v37: 16-bit 16-row bands from 120 B * nh,
# float32 20x15's 16-row bands up to 360 and 32-row ones from 368); float32 1x33 around its
# bands' 384 B * nh at 2, 4 and 6 heads (v43).
BAND_GRIDS = {2: ((40, 23), (48, 19), (32, 29), (37, 29), (20, 20), (20, 15)),
              4: ((20, 15), (8, 37), (37, 29), (1, 33))}
BATCHES = {(37, 29): (10, 16, 17, 22, 24, 25, 30, 32, 33, 61, 62, 64, 66, 67),
           (40, 23): (16, 32, 58, 59, 64, 66, 67),
           (1, 33): (16, 63, 64, 95, 96, 128, 191, 192, 200),
           (20, 15): (6, 8, 10, 11, 16, 17, 19, 20, 29, 30, 32, 33, 34, 44, 45, 59, 60, 61,
                      62, 66, 67, 68, 90, 91, 92, 128, 180, 184),
           (20, 20): (14, 15, 16, 17, 19, 20, 22, 25, 29, 30, 43, 44, 50, 59, 60, 64, 66, 67,
                      89, 90, 99, 100, 128, 179, 180, 198, 199)}


@pytest.mark.parametrize(("config", "pass_"), CASES, ids=map(_case_id, CASES))
def test_band_kernel_at_the_issue_grids(gpu_artifacts, config, pass_):
    op = _op(gpu_artifacts, config)
    bands = _bands(op, pass_)
    for height, width in BAND_GRIDS[config.itemsize]:
        for batch in BATCHES.get((height, width), (16, 32, 64)):
            kernel = CHECKS[pass_](op, config, batch, height, width, seed=height + batch)
            wanted = [b.entry for b in bands if _runs_band(b, config, batch, height * width)]
            assert wanted == ([kernel.entry] if kernel.band else []), (batch, kernel.entry)


@pytest.mark.parametrize(("config", "pass_"), CASES, ids=map(_case_id, CASES))
def test_band_kernel_through_the_native_library(gpu_artifacts, config, pass_, monkeypatch):
    """The native library chooses each band kernel where the runtime op does and runs it
    exactly, the ones past 48 KB of shared memory too (its launcher opts them in)."""
    monkeypatch.setenv("PSA_TVM_ARTIFACTS", str(gpu_artifacts))
    native_rt.forget()
    library = native_rt.load(gpu_artifacts)
    if library is None:
        pytest.skip(f"no native library in {gpu_artifacts} (psa-tvm build writes it)")
    op = _op(gpu_artifacts, config)
    dtype = DTYPES[config.dtype]
    try:
        for band in _bands(op, pass_):
            n = band.max_n
            batch = max(_batches(band, config, n)[0], 1)
            assert _runs_band(band, config, batch, n), (batch, n)
            half = (batch * config.num_heads, n, config.key_dim)
            if pass_ == "forward":
                lo, hi = inputs(half, dtype, "cuda", 1), inputs(half, dtype, "cuda", 2)
                out = poisoned((batch, config.channels, n, 1), dtype, "cuda")
                entry, *_ = library.plan_forward(lo, hi, out.tensor, "")
                outs = [out]
                library.merge_forward(lo, hi, out.tensor)
                expected = [reference.merge(lo, hi, config.num_heads, n, 1)]
            else:
                grad = inputs((batch, config.channels, n, 1), dtype, "cuda", 3)
                outs = [poisoned(half, dtype, "cuda"), poisoned(half, dtype, "cuda")]
                entry, *_ = library.plan_backward(grad, outs[0].tensor, outs[1].tensor, "")
                library.merge_backward(grad, outs[0].tensor, outs[1].tensor)
                expected = reference.merge_backward(grad, config.num_heads, config.key_dim)
            torch.cuda.synchronize()
            assert entry == band.entry, (batch, n, entry)
            where = f"{config.tag} B={batch} N={n} {entry} ({band.dynamic_smem_bytes} B dynamic)"
            for out, want in zip(outs, expected, strict=True):
                assert bitwise_equal(out.tensor, want) and out.canaries_intact(), where
    finally:
        native_rt.forget()
