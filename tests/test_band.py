"""The band kernels (psa_tvm/compiler/band.py) without a GPU: what their params accept, the
launch bound they add to the source, their manifest records and where the launch rule picks
them (for their pass, inside their ``N`` range and call sizes, with 16-byte aligned data
only)."""

from __future__ import annotations

import itertools
import shutil
from dataclasses import replace

import pytest

from psa_tvm.config import OpConfig
from psa_tvm.presets import PRESETS
from psa_tvm.runtime.manifest import Manifest
from psa_tvm.runtime.plan import choose, kernel_shapes
from psa_tvm.runtime.validation import MergeDims

band = pytest.importorskip("psa_tvm.compiler.band", exc_type=ImportError)

HALF = OpConfig(32, 4, "float16")
FLOAT = OpConfig(32, 4, "float32")


def _params(config: OpConfig):
    """The band forward of the config's first ``N`` range (every config has one)."""
    return band.default_params(config)[0]


def _pass_params(config: OpConfig, pass_: str):
    return [p for p in band.default_params(config) if p.pass_ == pass_]


def test_default_params_fit_and_cover_the_measured_rows():
    half, single = _params(HALF), _params(FLOAT)
    assert all(band.fits(c, p) is None for c in (HALF, FLOAT) for p in band.default_params(c))
    assert half.min_n <= 40 * 23 <= half.max_n and single.min_n <= 20 * 15 <= single.max_n
    assert not single.min_n <= 8 * 37 <= single.max_n  # N = 296: measured to lose
    assert band.stage_vectors(HALF, half) == 8 and band.stage_vectors(FLOAT, single) == 2
    # float32: every band backward lost but N = 33's (v42)
    assert [(p.min_n, p.max_n) for p in _pass_params(FLOAT, "backward")] == [(33, 33)]
    # Only the float32 8- and 16-row kernels hint their loads (without, the 8-row 37x29 kernel
    # lost: v30, v35; the 16-bit bands read two or four sectors of each line already).
    assert [p.l2_fetch for c in (HALF, FLOAT) for p in band.default_params(c)] == [
        0] * len(band.default_params(HALF)) + [128, 128, 0, 128, 0, 0]
    assert band.default_params(OpConfig(16, 4, "float16")) == ()  # measured at key_dim 32 only


@pytest.mark.parametrize("num_heads", [2, 4, 6])
def test_float32_1x33_bands_run_from_384_rows_at_every_head_count(num_heads):
    """float32 N = 33 (v42, H100: 32-row bands 0.96-1.02x a copy against v1k4's 1.14-1.25 at
    384-768 B * nh): one forward and one backward, both passes from the same 384 rows, which
    fit and whose bands are whole 16-byte vectors of the output (32 * 33 elements)."""
    config = OpConfig(32, num_heads, "float32")
    x33 = [p for p in band.default_params(config) if p.min_n == 33]
    assert [(p.pass_, p.rows, p.threads, p.ctas_per_sm, p.max_n) for p in x33] == [
        ("forward", 32, 128, 16, 33), ("backward", 32, 256, 8, 33)]
    assert all(band.fits(config, p) is None for p in x33)
    assert {_first_rows(p, 33) for p in x33} == {384}
    assert not any(p.min_n <= 33 <= p.max_n for p in band.default_params(
        OpConfig(32, num_heads, "float16")))  # 16-bit N = 33 ran at the floor (v40)


def test_the_37x29_kernels_split_the_calls_by_the_waves_they_fill():
    """16-bit N = 1072-1080: four kernels with ordered, disjoint size ranges, and at every N
    of the range the same B * nh falls in each (40-66, 88-99, 120-132, 248-264 rows, the last
    one a row wider at either end of the range), where its bands fill most of one or two
    waves of the CTAs that fit; the sizes between keep the shipped kernel."""
    tail = [p for p in _pass_params(HALF, "forward") if p.min_n <= 37 * 29 <= p.max_n]
    assert len(tail) == 4
    for before, after in itertools.pairwise(tail):
        assert after.min_numel > before.max_numel
    assert not any(band.dynamic_shared(HALF, p) for p in _pass_params(HALF, "forward"))
    spans = ((40, 66, 1), (88, 99, 1), (120, 132, 1), (248, 264, 2))  # B * nh, and waves
    _assert_spans(tail, spans)


def _first_rows(params, n: int) -> int:
    """The smallest ``B * nh`` a kernel runs for at ``N = n``."""
    return -(-params.min_numel // (2 * HALF.key_dim * n))


def test_the_16bit_20x20_kernels_fill_whole_waves_at_6_heads():
    """16-bit N = 399-401 (YOLO11x at 640 px): at 6 x 256 threads, 8-row bands for 88-99
    B * nh (one wave of 792 CTAs, batch 16 at 6 heads) and 16-row bands from 120 on (v36,
    v37's sweep); the sizes between and below keep the tiled kernel."""
    small, large = [p for p in _pass_params(HALF, "forward") if p.min_n <= 20 * 20 <= p.max_n]
    for params, rows in ((small, 8), (large, 16)):
        assert (params.rows, params.threads, params.ctas_per_sm, params.l2_fetch) == (
            rows, 256, 6, 0)
        assert (params.min_n, params.max_n) == (399, 401)
        assert not band.dynamic_shared(HALF, params)
    assert small.max_numel < large.min_numel and large.max_numel == 0
    _assert_spans([small], ((88, 99, 1),))
    assert all(_first_rows(large, n) == 120 for n in (399, 400, 401))


def test_the_16bit_20x15_kernel_runs_from_120_rows():
    """16-bit N = 297-303: the 20x20 kernel's 16-row bands from 120 B * nh on (v37, call 2:
    they beat the 8-byte tiled kernel at 128-768 B * nh and every head count)."""
    for num_heads in (2, 4, 6):
        config = OpConfig(32, num_heads, "float16")
        (params,) = [p for p in _pass_params(config, "forward") if p.min_n <= 20 * 15 <= p.max_n]
        assert (params.rows, params.threads, params.ctas_per_sm, params.l2_fetch,
                params.min_n, params.max_n, params.max_numel) == (16, 256, 6, 0, 297, 303, 0)
        assert band.stage_vectors(config, params) == 3
        assert [_first_rows(params, n) for n in (297, 300, 303)] == [120, 119, 118]
    assert not [p for p in _pass_params(HALF, "backward") if p.min_n <= 300 <= p.max_n]


def test_the_float32_20x15_kernels_split_the_calls_by_the_waves_they_fill():
    """float32 N = 297-303: hinted 8-row bands for 32-65 B * nh (one wave of 528 CTAs; 384
    threads at 4 heads, 256 at the others), hinted 16-row bands at 4 x 512 for 67-360 (v36,
    v37), v27's 32-row band from 368; ordered, disjoint call sizes."""
    for num_heads, threads in ((4, 384), (2, 256), (6, 256)):
        config = OpConfig(32, num_heads, "float32")
        small, middle, large = [p for p in band.default_params(config)
                                if p.min_n <= 20 * 15 <= p.max_n]
        assert all((p.min_n, p.max_n) == (297, 303) for p in (small, middle, large))
        assert (small.rows, small.threads, small.ctas_per_sm, small.l2_fetch) == (
            8, threads, 4, 128)
        assert (middle.rows, middle.threads, middle.ctas_per_sm, middle.l2_fetch) == (
            16, 512, 4, 128)
        assert (large.rows, large.threads, large.ctas_per_sm, large.l2_fetch,
                large.max_numel) == (32, 512, 2, 0, 0)
        assert small.max_numel < middle.min_numel and middle.max_numel < large.min_numel
        _assert_spans([small, middle], ((32, 65, 1), (67, 360, 3)))
        for n in (297, 300, 303):  # from 368 rows at N 297, 361 at 303
            assert 361 <= _first_rows(large, n) <= 368, n


def _float32_tail(config: OpConfig):
    (tail,) = [p for p in band.default_params(config) if p.min_n <= 37 * 29 <= p.max_n]
    return tail


def test_the_float32_37x29_kernel_fills_one_wave():
    """float32 N = 1072-1080: 8-row bands at 4 CTAs an SM for 40-66 B * nh, one wave of 528
    CTAs (v35; past it the shifted kernel won), with loads that bring whole lines into L2; 512
    threads at 4 heads, 384 at the head counts where 512 spills."""
    for num_heads, threads in ((4, 512), (2, 384), (6, 384)):
        config = OpConfig(32, num_heads, "float32")
        tail = _float32_tail(config)
        assert (tail.rows, tail.threads, tail.ctas_per_sm, tail.l2_fetch) == (8, threads, 4, 128)
        assert (tail.min_n, tail.max_n) == (1072, 1080) and not band.dynamic_shared(config, tail)
        _assert_spans([tail], ((40, 66, 1),))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc to ask ptxas")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("num_heads", [2, 4, 6])
def test_the_band_kernels_do_not_spill(tmp_path, dtype, num_heads):
    """ptxas keeps every band kernel in its registers at every YOLO head count
    (tests/test_build.py checks the 4-head builds; the float32 37x29 kernel at 512 threads
    spilled at 2 and 6 heads, and 16-bit 32-row bands at 6 CTAs an SM at every count)."""
    from psa_tvm.compiler.lower import lower_cuda
    from psa_tvm.compiler.nvcc import compile_source

    config = OpConfig(32, num_heads, dtype)
    kernels = {f"band{i}": params for i, params in enumerate(band.default_params(config))}
    lowered = lower_cuda({name: band.band_pass(config, params, name)
                          for name, params in kernels.items()})
    entries = {lowered.kernels[name]["entry"]: params for name, params in kernels.items()}
    source = tmp_path / "bands.cu"
    source.write_text(band.patch_source(lowered.source, entries))
    resources = compile_source(source, ["sm_90"], "nvcc").resources
    for entry in entries:
        report = resources[entry]["sm_90"]
        assert report["spill_stores"] == report["spill_loads"] == report["stack_frame"] == 0, (
            entry, report)
    # The hinted loads are defined once a build: a float4 and a uint4 one.
    hinted = any(params.l2_fetch == 128 for params in entries.values())
    assert source.read_text().count("ld.global.nc.L2::128B") == (2 if hinted else 0)


def _assert_spans(kernels, spans) -> None:
    """Each kernel runs for the ``B * nh`` of its span at every ``N`` of its range, and its
    bands fill that many waves of its CTAs at the span's last ``B * nh``."""
    for params, (first, last, waves) in zip(kernels, spans, strict=True):
        bands_per_row = 2 * HALF.key_dim // params.rows
        assert -(-last * bands_per_row // params.ctas) == waves
        for n in range(params.min_n, params.max_n + 1):
            per_row = 2 * HALF.key_dim * n  # merged elements of one B * nh
            rows = [r for r in range(1, 1000) if params.min_numel <= r * per_row
                    <= params.max_numel]
            # The limits are taken at the range's ends, so inside it they move by up to
            # last * (max_n / min_n - 1) rows: 37x29's 248-264 by one, float32 20x15's 65 by
            # one and 360 by seven.
            slack = last * (params.max_n - params.min_n) // params.min_n
            assert abs(rows[0] - first) <= slack and abs(rows[-1] - last) <= slack, (params, n)


def test_the_band_backwards_split_the_calls_by_the_waves_they_fill():
    """16-bit only: 16-row bands for N 897-928 at 240-264 B * nh (two waves of 528 CTAs; the
    range is wider, so its limits move by up to 9 rows inside it, but stay between the 224 and
    288 rows measured to lose), 32-row bands for N
    1073-1079 at 120-132 and 248-264 (one and two waves of 264), the latter two in dynamic
    shared memory; none at N 1072 or 1080, where 32-row tiles lost."""
    near, *tail = _pass_params(HALF, "backward")
    assert (near.rows, near.min_n, near.max_n) == (16, 897, 928) and not band.dynamic_shared(
        HALF, near)
    assert all((p.rows, p.min_n, p.max_n) == (32, 1073, 1079) and band.dynamic_shared(HALF, p)
               for p in tail)
    assert tail[1].min_numel > tail[0].max_numel
    _assert_spans(tail, ((120, 132, 1), (248, 264, 2)))
    for n, (first, last) in ((897, (240, 273)), (920, (234, 266)), (928, (232, 264))):
        rows = [r for r in range(1, 400)
                if near.min_numel <= r * 2 * HALF.key_dim * n <= near.max_numel]
        assert (rows[0], rows[-1]) == (first, last), n
    assert -(-264 * 2 * HALF.key_dim // near.rows // near.ctas) == 2


@pytest.mark.parametrize(("changes", "why"), [
    ({"rows": 12}, "not a multiple of 8"),
    ({"threads": 200}, "whole warps"),
    ({"min_n": 961}, "is empty"),
    ({"rows": 32, "max_n": 4000}, "a CTA may have"),
    ({"rows": 32, "max_n": 1080, "threads": 512, "ctas_per_sm": 4}, "CTAs of 69120 bytes"),
    ({"max_n": 1100}, "would spill"),
    ({"ctas_per_sm": 0}, "must be positive"),
    ({"threads": 512, "ctas_per_sm": 5}, "an SM holds"),
    ({"min_numel": 100, "max_numel": 99}, "are empty"),
    ({"pass_": "sideways"}, "not one of"),
    ({"l2_fetch": 96}, "l2_fetch 96: not one of"),
    ({"pass_": "backward", "l2_fetch": 128}, "forward only"),
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


_TWO_KERNELS = ('extern "C" __global__ void __launch_bounds__(512) a_kernel(float* lo_flat_ptr,'
                ' float* hi_flat_ptr);\n'
                '__device__ int other;\n'
                'extern "C" __global__ void __launch_bounds__(512) a_kernel(float* lo_flat_ptr,'
                ' float* hi_flat_ptr) {\n'
                '  *(float4*)(s + 0) = *(float4*)(lo_flat_ptr + ((t * 32) + (b * N)));\n'
                '  *(float4*)(s + 4) = *(float4*)(hi_flat_ptr + (t * 32));\n}\n'
                'extern "C" __global__ void __launch_bounds__(512) b_kernel(float* lo_flat_ptr,'
                ' float* hi_flat_ptr) {\n'
                '  *(float4*)(s + 0) = *(float4*)(lo_flat_ptr + (t * 32));\n}\n')


def test_fetch_hints_route_one_kernels_loads_through_the_hinted_load():
    out = band.fetch_hints(_TWO_KERNELS, {"a_kernel": 128, "b_kernel": 0})
    a_body = out[out.index("a_kernel(float* lo_flat_ptr, float* hi_flat_ptr) {"):
                 out.index("b_kernel(")]
    assert "psa_ld_l2_128_float4(lo_flat_ptr + ((t * 32) + (b * N)))" in a_body
    assert "psa_ld_l2_128_float4(hi_flat_ptr + (t * 32))" in a_body
    assert "*(float4*)(lo_flat_ptr" not in a_body and "*(float4*)(hi_flat_ptr" not in a_body
    assert out[out.index("b_kernel("):].count("*(float4*)(lo_flat_ptr + (t * 32))") == 1
    # The loads are defined once, ahead of the first kernel (its declaration).
    assert out.count("ld.global.nc.L2::128B.v4.f32") == 1
    assert out.index("psa_ld_l2_128_float4(const void* p)") < out.index('extern "C"')
    assert band.fetch_hints(_TWO_KERNELS, {"a_kernel": 0}) == _TWO_KERNELS
    with pytest.raises(ValueError, match="c_kernel: no kernel definition"):
        band.fetch_hints(_TWO_KERNELS, {"c_kernel": 128})


def test_patch_source_bounds_and_hints_the_band_kernels():
    params = replace(_params(FLOAT), ctas_per_sm=4, l2_fetch=256)
    out = band.patch_source(_TWO_KERNELS, {"a_kernel": params})
    assert out.count("__launch_bounds__(512, 4) a_kernel(") == 2
    assert out.count("psa_ld_l2_256_float4(") == 3  # its definition and a_kernel's two loads


@pytest.mark.parametrize("config", [HALF, FLOAT], ids=lambda c: c.tag)
def test_the_launch_rule_picks_each_band_kernel_inside_its_ranges_only(small_artifacts,
                                                                        config):
    build = Manifest.load(small_artifacts).find(config, "tiled")
    bands = [k for k in build.kernels if k.band]
    assert len(bands) == len(band.default_params(config))
    channels = config.channels

    def chosen(pass_: str, n: int, batch: int, alignment: int = 16):
        dims = MergeDims(batch, config.num_heads, config.key_dim, 1, n, n)
        return choose(build, pass_, dims, alignment).kernel.entry

    def expected(pass_: str, n: int, batch: int, alignment: int = 16) -> str | None:
        """The pass's band kernel that should run: of those holding the call, the one with
        the larger min_numel (a narrower N range inside a wider one); None: no band kernel."""
        numel = batch * channels * n
        holding = [k for k in bands if k.pass_ == pass_ and k.runs_at(n) and k.runs_for(numel)
                   ] if alignment % 16 == 0 else []
        return max(holding, key=lambda k: k.min_numel).entry if holding else None

    def band_or_none(pass_: str, n: int, batch: int, alignment: int = 16) -> str | None:
        entry = chosen(pass_, n, batch, alignment)
        return entry if entry in {k.entry for k in bands} else None

    for params in band.default_params(config):
        pass_ = params.pass_
        kernels = [k for k in bands if k.pass_ == pass_]
        (kernel,) = [k for k in kernels if (k.band, int(k.block[0]), k.min_n, k.min_numel) == (
            params.rows, params.threads, params.min_n, params.min_numel)]
        assert (kernel.vec, kernel.index_dtype) == (1, "int32")
        assert (kernel.min_n, kernel.max_n, kernel.max_numel) == (
            params.min_n, params.max_n, params.max_numel)
        assert kernel.rank == band.rank(config) > max(k.rank for k in build.kernels
                                                      if not k.band)
        assert kernel.dynamic_smem_bytes == (band.shared_bytes(config, params) if
                                             band.dynamic_shared(config, params) else 0)
        assert build.source.read_text().count(
            f"__launch_bounds__({params.threads}, {params.ctas_per_sm}) {kernel.entry}(") == 2
        # odd and even N (a range of one N: that one, 1x33's)
        for n in sorted({params.min_n, min(params.min_n + 1, params.max_n), params.max_n}):
            first = -(-params.min_numel // (channels * n))  # the smallest batch it runs
            last = params.max_numel // (channels * n) if params.max_numel else 4 * first
            assert first <= last, (params, n)
            for batch in (first - 1, first, last, last + 1):  # just outside its sizes too
                assert band_or_none(pass_, n, batch) == expected(pass_, n, batch), (
                    params, n, batch)
            assert expected(pass_, n, first) == expected(pass_, n, last) == kernel.entry or any(
                k.min_numel > kernel.min_numel and k.runs_at(n) for k in kernels), (params, n)
            assert expected(pass_, n, first - 1) != kernel.entry  # too small
            if params.max_numel:
                assert expected(pass_, n, last + 1) != kernel.entry  # too large
            assert band_or_none(pass_, n, first, alignment=8) is None
        first = -(-params.min_numel // (channels * params.max_n))
        for n in (params.min_n - 1, params.max_n + 1):
            assert chosen(pass_, n, first) != kernel.entry, n
            assert band_or_none(pass_, n, first) == expected(pass_, n, first), (params, n)

        # The grid: one CTA per band up to the CTAs that fit the GPU, then persistent.
        def grid(batch: int, kernel=kernel, params=params) -> tuple:
            dims = MergeDims(batch, config.num_heads, config.key_dim, 1, params.max_n,
                             params.max_n)
            return kernel.launch_dims(kernel.bind_symbols(kernel_shapes(dims)))

        bands_per_batch = 2 * config.num_heads * config.key_dim // params.rows
        assert grid(1) == ((bands_per_batch, 1, 1), (params.threads, 1, 1))
        assert grid(512) == ((params.ctas, 1, 1), (params.threads, 1, 1))


def test_the_gpu_band_test_covers_every_build_with_band_kernels():
    """``tests/test_gpu_band.py`` runs on a GPU host without TVM, so its cases are a literal
    list; this keeps them equal to what :func:`band.default_params` builds for the test
    matrix (every config and pass with band kernels, and no other)."""
    from tests.test_gpu_band import CASES  # a GPU module: imported only by this test

    built = {(c.tag, p.pass_) for c in PRESETS["tests"] for p in band.default_params(c)}
    tested = [(c.tag, p) for c, p in CASES]
    assert len(tested) == len(set(tested))
    assert set(tested) == built
