"""GPU tests of the band forwards (psa_tvm/compiler/band.py): the kernel runs exactly inside
its ``N`` range from its ``min_numel`` on, with 16-byte aligned data, and is bit-exact with
canaries intact at both ends of the range, odd and even ``N``, calls just past its size (each
CTA one or two bands) and the issue's grids that it serves.

    PSA_TVM_ARTIFACTS=.artifacts python -m pytest -m gpu tests/test_gpu_band.py
"""

from __future__ import annotations

import pytest

from psa_tvm.config import OpConfig
from tests.helpers import DTYPES
from tests.test_gpu import runtime_op
from tests.test_gpu_tails import check_forward

pytestmark = pytest.mark.gpu

CONFIGS = [OpConfig(32, nh, dtype) for nh in (2, 4, 6) for dtype in DTYPES]


def _op(gpu_artifacts, config: OpConfig):
    return runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, "tiled")


def _band(op):
    (band,) = [k for k in op.builds["forward"].kernels if k.band]
    return band


def _smallest_batch(kernel, config: OpConfig, n: int) -> int:
    return -(-kernel.min_numel // (config.channels * n))


def _runs_band(kernel, config: OpConfig, batch: int, n: int) -> bool:
    return kernel.runs_at(n) and batch * config.channels * n >= kernel.min_numel


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.tag)
def test_band_forward_inside_and_outside_its_range(gpu_artifacts, config):
    op = _op(gpu_artifacts, config)
    band = _band(op)
    middle = (band.min_n + band.max_n) // 2
    ran = 0
    for n in (band.min_n - 1, band.min_n, band.min_n + 1, middle | 1, middle & ~3,
              band.max_n, band.max_n + 1):
        smallest = _smallest_batch(band, config, n)
        for batch in (smallest - 1, smallest, 2 * smallest + 1):
            kernel = check_forward(op, config, batch, 1, n, seed=n + batch)
            inside = _runs_band(band, config, batch, n)
            assert (kernel.entry == band.entry) == inside, (n, batch, kernel.entry)
            ran += inside
    assert ran >= 8


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.tag)
def test_band_forward_needs_16_byte_aligned_data(gpu_artifacts, config):
    """A view 8 bytes off (or 4): the 16-byte band stores cannot run, the narrower kernels do."""
    op = _op(gpu_artifacts, config)
    band = _band(op)
    batch = _smallest_batch(band, config, band.max_n)
    kernel = check_forward(op, config, batch, 1, band.max_n, offset=8 // config.itemsize, seed=3)
    assert kernel.entry != band.entry and kernel.vec_kd < 16 // config.itemsize


# The issue's grids at a band range, at batch 16, 32 and 64: 1280x720 letterbox (40x23) and
# 48x19 / 32x29 for 16-bit, 640x480 (20x15) for float32 and 8x37 (N = 296) just outside its
# range.
BAND_GRIDS = {2: ((40, 23), (48, 19), (32, 29)), 4: ((20, 15), (8, 37))}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.tag)
def test_band_forward_at_the_issue_grids(gpu_artifacts, config):
    op = _op(gpu_artifacts, config)
    band = _band(op)
    for height, width in BAND_GRIDS[config.itemsize]:
        for batch in (16, 32, 64):
            kernel = check_forward(op, config, batch, height, width, seed=height + batch)
            assert (kernel.entry == band.entry) == _runs_band(band, config, batch,
                                                              height * width), kernel.entry
