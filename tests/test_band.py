"""The band forwards (psa_tvm/compiler/band.py) without a GPU: what their params accept, the
launch bound they add to the source, their manifest records and where the launch rule picks
them (inside their ``N`` range, from their size, with 16-byte aligned data only)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from psa_tvm.config import OpConfig
from psa_tvm.runtime.manifest import Manifest
from psa_tvm.runtime.plan import choose, kernel_shapes
from psa_tvm.runtime.validation import MergeDims

band = pytest.importorskip("psa_tvm.compiler.band", exc_type=ImportError)

HALF = OpConfig(32, 4, "float16")
FLOAT = OpConfig(32, 4, "float32")


def _params(config: OpConfig):
    (params,) = band.default_params(config)
    return params


def test_default_params_fit_and_cover_the_measured_rows():
    half, single = _params(HALF), _params(FLOAT)
    assert band.fits(HALF, half) is None and band.fits(FLOAT, single) is None
    assert half.min_n <= 40 * 23 <= half.max_n and single.min_n <= 20 * 15 <= single.max_n
    assert not single.min_n <= 8 * 37 <= single.max_n  # N = 296: measured to lose
    assert band.stage_vectors(HALF, half) == 8 and band.stage_vectors(FLOAT, single) == 5
    assert band.default_params(OpConfig(16, 4, "float16")) == ()  # measured at key_dim 32 only


@pytest.mark.parametrize(("changes", "why"), [
    ({"rows": 12}, "not a multiple of 8"),
    ({"threads": 200}, "whole warps"),
    ({"min_n": 961}, "is empty"),
    ({"rows": 32, "max_n": 960}, "past 48 KB"),
    ({"max_n": 1100}, "would spill"),
    ({"ctas_per_sm": 0}, "must be positive"),
])
def test_fits_names_what_is_wrong(changes, why):
    assert why in band.fits(HALF, replace(_params(HALF), **changes))


def test_min_blocks_adds_the_resident_ctas_to_one_kernel():
    source = ('extern "C" __global__ void __launch_bounds__(256) a_kernel(int N);\n'
              'extern "C" __global__ void __launch_bounds__(256) a_kernel(int N) {}\n'
              'extern "C" __global__ void __launch_bounds__(256) b_kernel(int N) {}\n')
    out = band.min_blocks(source, {"a_kernel": 4})
    assert out.count("__launch_bounds__(256, 4) a_kernel(") == 2
    assert "__launch_bounds__(256) b_kernel(" in out
    with pytest.raises(ValueError, match="c_kernel"):
        band.min_blocks(source, {"c_kernel": 2})


@pytest.mark.parametrize("config", [HALF, FLOAT], ids=lambda c: c.tag)
def test_the_launch_rule_picks_the_band_forward_inside_its_range_only(small_artifacts, config):
    build = Manifest.load(small_artifacts).find(config, "tiled")
    (kernel,) = [k for k in build.kernels if k.band]
    params = _params(config)
    assert (kernel.pass_, kernel.vec, kernel.index_dtype, kernel.band) == (
        "forward", 1, "int32", params.rows)
    assert (kernel.min_n, kernel.max_n, kernel.min_numel) == (
        params.min_n, params.max_n, params.min_numel)
    assert kernel.rank == band.rank(config) > max(k.rank for k in build.kernels if not k.band)
    assert kernel.dynamic_smem_bytes == 0
    assert build.source.read_text().count(
        f"__launch_bounds__({params.threads}, {params.ctas_per_sm}) {kernel.entry}(") == 2
    channels = config.channels

    def chosen(n: int, numel: int, alignment: int = 16):
        batch = -(-numel // (channels * n))
        dims = MergeDims(batch, config.num_heads, config.key_dim, 1, n, n)
        return choose(build, "forward", dims, alignment).kernel

    for n in (params.min_n, params.min_n + 1, params.max_n):  # odd and even N
        assert chosen(n, params.min_numel).entry == kernel.entry, n
        assert chosen(n, params.min_numel - channels * n).entry != kernel.entry  # too small
        assert chosen(n, params.min_numel, alignment=8).entry != kernel.entry
    for n in (params.min_n - 1, params.max_n + 1):
        assert chosen(n, 4 * params.min_numel).entry != kernel.entry, n

    # The grid: one CTA per band up to the CTAs that fit the GPU, then persistent.
    def grid(batch: int) -> tuple:
        dims = MergeDims(batch, config.num_heads, config.key_dim, 1, params.max_n, params.max_n)
        return kernel.launch_dims(kernel.bind_symbols(kernel_shapes(dims)))

    bands_per_batch = 2 * config.num_heads * config.key_dim // params.rows
    assert grid(1) == ((bands_per_batch, 1, 1), (params.threads, 1, 1))
    assert grid(512) == ((params.ctas, 1, 1), (params.threads, 1, 1))
