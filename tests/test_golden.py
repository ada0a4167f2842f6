"""Golden tests of the schedule rules (TVM dlight's style): the scheduled TIR of each rule is
compared structurally with a reviewed TVMScript file. No GPU, no CUDA compiler needed."""

from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")

from tests.golden import (  # noqa: E402
    BAND_CONFIGS,
    CASES,
    CPU_LINES_CASES,
    CPU_SHUFFLE_CASES,
    SHIFTED_PASSES,
    band_kernel,
    case_id,
    cpu_lines_kernel,
    cpu_shuffle_kernel,
    golden_band_path,
    golden_cpu_lines_path,
    golden_cpu_shuffle_path,
    golden_path,
    golden_shifted_path,
    scheduled,
    shifted_kernel,
)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_scheduled_tir_matches_the_golden_file(case):
    expected = tvm.script.from_source(golden_path(*case).read_text())
    actual = scheduled(*case)
    tvm.ir.assert_structural_equal(actual.with_attr("global_symbol", None),
                                   expected.with_attr("global_symbol", None), map_free_vars=True)


def test_golden_files_are_what_a_rule_change_would_show():
    """A different schedule must fail the comparison (the golden test is not vacuous)."""
    expected = tvm.script.from_source(golden_path("tiled", "forward", 4).read_text())
    other = scheduled("rowwise", "forward", 1)
    with pytest.raises(ValueError):
        tvm.ir.assert_structural_equal(other, expected, map_free_vars=True)


@pytest.mark.parametrize("pass_", SHIFTED_PASSES)
def test_shifted_kernel_matches_the_golden_file(pass_):
    """The hand-written shifted N-side kernels (not a schedule, but reviewed the same way). As
    printed text: their flat ``decl_buffer`` views do not survive a TVMScript round trip
    structurally (the parsed view's layout differs), so the script itself is the golden."""
    assert shifted_kernel(pass_).script() == golden_shifted_path(pass_).read_text()


@pytest.mark.parametrize("name", BAND_CONFIGS)
def test_band_kernel_matches_the_golden_file(name):
    """The hand-written band kernels, forwards and backwards, compared as text like the
    shifted kernels."""
    assert band_kernel(name).script() == golden_band_path(name).read_text()


@pytest.mark.parametrize("name", CPU_SHUFFLE_CASES)
def test_cpu_shuffle_kernel_matches_the_golden_file(name):
    """The CPU register-tile kernels (tile loops, shuffle network, slice prefetch), compared as
    text like the band kernels."""
    assert cpu_shuffle_kernel(name).script() == golden_cpu_shuffle_path(name).read_text()


@pytest.mark.parametrize("name", CPU_LINES_CASES)
def test_cpu_lines_kernel_matches_the_golden_file(name):
    """The aligned-line forward (chunks, passes of one channel group, the ``vpermt2w`` /
    ``vpermt2d`` joins, the unaligned first, last and tail blocks), compared as text."""
    assert cpu_lines_kernel(name).script() == golden_cpu_lines_path(name).read_text()
