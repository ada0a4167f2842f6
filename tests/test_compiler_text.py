"""The compiler's text processing on fixed sample strings: the CUDA-source fix-ups and the
ptxas resource-report parser. No TVM, no nvcc."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")  # psa_tvm.compiler is the compiler half

from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.nvcc import check_archs, parse_ptxas_report

GATHER_8 = ("*(uint4*)(out + i) = make_uint4(s[a], s[a + 68], s[(b * 2)], s[b], "
            "s[c], s[c + 1], f(x, y), s[d]);")


def test_16bit_gather_of_8_lanes_is_packed_in_pairs():
    fixed = pack_16bit_gathers(GATHER_8, "float16")
    assert fixed == ("*(uint4*)(out + i) = make_uint4(__pack_half2(s[a], s[a + 68]),"
                     "__pack_half2( s[(b * 2)], s[b]),__pack_half2( s[c], s[c + 1]),"
                     "__pack_half2( f(x, y), s[d]));")


def test_bfloat16_uses_its_own_pack_and_uint2_of_4_lanes():
    fixed = pack_16bit_gathers("v = make_uint2(p[0], p[1], p[2], p[3]);", "bfloat16")
    assert fixed == ("v = make_uint2(__pack_nv_bfloat162(p[0], p[1]),"
                     "__pack_nv_bfloat162( p[2], p[3]));")


@pytest.mark.parametrize("source", [
    "v = make_uint4(a, b, c, d);",            # already 4 components: left alone
    "v = make_uint2(x, y);",
    "float4 f = make_float4(a, b, c, d);",   # not a 16-bit gather
])
def test_well_formed_constructors_are_untouched(source):
    assert pack_16bit_gathers(source, "float16") == source


def test_float32_sources_are_untouched():
    assert pack_16bit_gathers(GATHER_8, "float32") == GATHER_8


def test_unbalanced_call_is_an_error():
    with pytest.raises(ValueError, match="unbalanced"):
        pack_16bit_gathers("v = make_uint4(a, b, (c, d, e, f, g, h;", "float16")


PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'psa_merge_fwd_tiled_v8_i32_kernel' for 'sm_80'
ptxas info    : Function properties for psa_merge_fwd_tiled_v8_i32_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 18 registers, used 1 barriers, 4608 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'psa_merge_fwd_tiled_v8_i32_kernel' for 'sm_90'
ptxas info    : Function properties for psa_merge_fwd_tiled_v8_i32_kernel
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 20 registers, used 1 barriers, 4608 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'psa_merge_bwd_rowwise_v1_i32_kernel' for 'sm_90'
ptxas info    : Function properties for psa_merge_bwd_rowwise_v1_i32_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 368 bytes cmem[0]
"""


def test_ptxas_report_is_parsed_per_entry_and_arch():
    report = parse_ptxas_report(PTXAS)
    fwd = report["psa_merge_fwd_tiled_v8_i32_kernel"]
    assert fwd["sm_80"] == {"registers": 18, "smem_bytes": 4608, "stack_frame": 0,
                            "spill_stores": 0, "spill_loads": 0}
    assert fwd["sm_90"] == {"registers": 20, "smem_bytes": 4608, "stack_frame": 8,
                            "spill_stores": 4, "spill_loads": 4}
    assert report["psa_merge_bwd_rowwise_v1_i32_kernel"]["sm_90"]["smem_bytes"] == 0
    assert parse_ptxas_report("nvcc warning: nothing here") == {}


def test_arch_names_are_checked_and_sorted():
    assert check_archs(["sm_90", "sm_80", "sm_90"]) == ["sm_80", "sm_90"]
    assert check_archs(["sm_90a", "sm_100"]) == ["sm_90a", "sm_100"]
    for bad in (["volta"], ["sm_9"], []):
        with pytest.raises(ValueError, match="arch"):
            check_archs(bad)
