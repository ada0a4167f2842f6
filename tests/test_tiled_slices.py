"""The tiled rule's ``slices_per_cta`` / ``heads_inner`` options and tiles that do not divide N,
without a GPU: the scheduled TIR itself run on the CPU (thread loops made serial, the shared
tile made a scratch buffer), bit-exact against the layout family's torch definition, plus
golden files of the scheduled TIR (tests/golden) and the params' storage.

Serial thread loops keep the kernel's semantics here: a CTA's threads only exchange data
through the shared tile between its two loop nests (fill, then drain), which run one after the
other anyway. What this cannot see is a race between threads; the GPU timing run checks every
candidate bitwise against the others (``layout_tune time``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from psa_tvm.config import OpConfig
from psa_tvm.layouts import STREAM_OPS
from tests.helpers import bitwise_equal, inputs

tvm = pytest.importorskip("tvm")

from psa_tvm.compiler.artifact import BuildRequest  # noqa: E402
from psa_tvm.compiler.compute import stream_pass  # noqa: E402
from psa_tvm.compiler.rules import get_rule  # noqa: E402
from psa_tvm.compiler.rules.base import params_as_dict  # noqa: E402
from psa_tvm.compiler.rules.tiled import TiledParams  # noqa: E402
from psa_tvm.tools import layout_tune  # noqa: E402
from tests.golden import PARAM_CASES, golden_param_path, scheduled_with  # noqa: E402
from tests.test_attention import A_DTYPES, _torch_reference  # noqa: E402

RULE = get_rule("tiled")


class _SerialThreadsTiled(type(RULE)):
    """The rule as the emulation needs it: ``stage_coalesced``'s copy and loads in thread loops
    of their own (run one after the other here), each thread its own slice of the register
    buffer; on the GPU the loops are unified and the buffer is the thread's registers."""

    unify_threads = False


EMULATED = _SerialThreadsTiled()


def _serial_threads(script: str) -> str:
    """``T.thread_binding(EXTENT, thread="...")`` -> ``T.serial(EXTENT)``; shared -> global."""
    out, marker = [], "T.thread_binding("
    rest = script
    while (at := rest.find(marker)) >= 0:
        out.append(rest[:at] + "T.serial(")
        rest = rest[at + len(marker):]
        depth, i = 0, 0
        while depth or rest[i] != ",":  # the extent ends at the first top-level comma
            depth += {"(": 1, ")": -1}.get(rest[i], 0)
            i += 1
        out.append(rest[:i])
        rest = rest[rest.index(")", i):]  # drop ', thread="..."'
    return ("".join(out) + rest).replace('scope="shared"', 'scope="global"')


def emulate(func):
    """The GPU-scheduled PrimFunc compiled for the CPU with its threads run one by one."""
    serial = tvm.script.from_source(_serial_threads(func.script()))
    return tvm.compile(tvm.IRModule({"f": serial.with_attr("global_symbol", "f")}),
                       target="llvm")["f"]


def run_scheduled(op_name: str, pass_: str, config: OpConfig, params: TiledParams, vec: int,
                  batch: int, height: int, width: int) -> None:
    """Schedule one pass with ``params``, run it on poisoned outputs, compare bitwise."""
    op = STREAM_OPS[op_name]
    n, kd, nh = height * width, config.key_dim, config.num_heads
    func = stream_pass(config, op, pass_, vec=vec, name="f")
    kernel = emulate(EMULATED.apply(func, pass_, config, params, vec,
                                    RULE.vector_width(config, params)))
    shapes = op.kernel_shapes(pass_, batch, n, nh, kd)
    names = op.tensor_names(pass_)
    dtype = A_DTYPES[config.dtype]
    tensors = {name: inputs(shapes[name], dtype, "cpu", seed=i)
               for i, name in enumerate(names[:-1])}
    out = torch.full(shapes[names[-1]], float("nan"), dtype=dtype)
    kernel(*tensors.values(), out, n // vec)
    expected = _torch_reference(op, pass_, tensors, batch, n, nh, kd, height, width)
    assert bitwise_equal(out, expected), (op_name, pass_, params, vec)


F16 = OpConfig(32, 2, "float16")
SETS = {
    "default": RULE.default_params(F16),
    "streams2": TiledParams(tile_n=64, threads=128, row_threads=4, slices_per_cta=2),
    "streams4": TiledParams(tile_n=64, threads=256, row_threads=4, slices_per_cta=4),
    "heads2": TiledParams(tile_n=80, threads=160, row_threads=4, slices_per_cta=2,
                          heads_inner=True),
    "heads2_pad32": TiledParams(tile_n=80, threads=160, row_threads=4, pad_bytes=32,
                                slices_per_cta=2, heads_inner=True),
    "tile80": TiledParams(tile_n=80, threads=160, row_threads=4),
    "tile64_r4": TiledParams(tile_n=64, threads=128, row_threads=4),
    "tile40_streams2_x": TiledParams(tile_n=40, threads=160, row_threads=2, slices_per_cta=2,
                                     slices_on_x=True),
    # whole heads per CTA: every stream of 2 heads (qkv: 8 slices; attn: 4)
    "heads_whole8": TiledParams(tile_n=32, threads=256, row_threads=4, slices_per_cta=8),
    "heads_whole4": TiledParams(tile_n=32, threads=128, row_threads=4, slices_per_cta=4),
    # a skew per group of vec_kd tile rows (whole positions per warp access on the kd side)
    "tile64_r4_gpad32": TiledParams(tile_n=64, threads=128, row_threads=4, group_pad_bytes=32),
    "tile80_r2_gpad16": TiledParams(tile_n=80, threads=160, row_threads=2, group_pad_bytes=16),
    "streams2_r4_gpad32": TiledParams(tile_n=64, threads=256, row_threads=4, slices_per_cta=2,
                                      group_pad_bytes=32),
    "heads2_r4_gpad32": TiledParams(tile_n=64, threads=256, row_threads=4, slices_per_cta=2,
                                    heads_inner=True, group_pad_bytes=32),
    "heads_whole4_gpad32": TiledParams(tile_n=32, threads=256, row_threads=4, slices_per_cta=4,
                                       group_pad_bytes=32),
    # the forward's loads of a thread all before its first shared store (a register stage):
    # one and several vectors per kd row, tiles with a partial last one, slices and heads
    "default_staged": replace(RULE.default_params(F16), stage_loads=True),
    "tile128_r1_staged": TiledParams(tile_n=128, threads=128, row_threads=1, stage_loads=True),
    "tile80_staged": TiledParams(tile_n=80, threads=160, row_threads=4, stage_loads=True),
    "heads2_r4_gpad32_staged": TiledParams(tile_n=64, threads=256, row_threads=4,
                                           slices_per_cta=2, heads_inner=True,
                                           group_pad_bytes=32, stage_loads=True),
    "streams2_x_staged": TiledParams(tile_n=40, threads=160, row_threads=2, slices_per_cta=2,
                                     slices_on_x=True, stage_loads=True),
    "heads_whole8_staged": TiledParams(tile_n=32, threads=256, row_threads=4, slices_per_cta=8,
                                       stage_loads=True),
    # the stage in the unstaged load order (several positions and kd vectors per thread, a
    # partial last tile, slices and heads)
    "tile128_r2_coalesced": TiledParams(tile_n=128, threads=128, row_threads=2, stage_loads=True,
                                        stage_coalesced=True),
    "tile80_coalesced": TiledParams(tile_n=80, threads=160, row_threads=4, stage_loads=True,
                                    stage_coalesced=True),
    "heads2_r4_gpad32_coalesced": TiledParams(tile_n=64, threads=128, row_threads=4,
                                              slices_per_cta=2, heads_inner=True,
                                              group_pad_bytes=32, stage_loads=True,
                                              stage_coalesced=True),
    # the merge's v17 forward shape, and a shorter tile for the narrower (scalar) kernels
    "tile256_coalesced_narrow": TiledParams(tile_n=256, threads=256, row_threads=4,
                                            group_pad_bytes=32, stage_loads=True,
                                            stage_coalesced=True, narrow_tile_n=64,
                                            narrow_threads=128),
}


def _fits(op_name: str, params: TiledParams, num_heads: int) -> bool:
    """Whether ``slices_per_cta`` groups this op's slices: a divisor of its streams (heads with
    heads_inner), or whole heads."""
    k, streams = params.slices_per_cta, STREAM_OPS[op_name].num_streams
    if params.heads_inner:
        return num_heads % k == 0
    return streams % k == 0 or (k % streams == 0 and num_heads * streams % k == 0)


@pytest.mark.parametrize("which", list(SETS))
@pytest.mark.parametrize("op_name", list(STREAM_OPS))
def test_scheduled_family_is_bit_exact(op_name, which):
    """Every op and pass, 16-byte kernels at an N that leaves a partial last tile (N = 104 =
    64 + 40 = 80 + 24) and the scalar kernel at an odd N (63)."""
    params = SETS[which]
    if not _fits(op_name, params, F16.num_heads):
        pytest.skip("slices_per_cta does not group this op's slices")
    for pass_ in STREAM_OPS[op_name].passes:
        run_scheduled(op_name, pass_, F16, params, 8, 2, 8, 13)
        run_scheduled(op_name, pass_, F16, params, 1, 1, 7, 9)


def test_float32_with_a_group_pad():
    config = OpConfig(32, 2, "float32")
    params = TiledParams(tile_n=64, threads=256, row_threads=8, group_pad_bytes=64)
    for op_name in ("attn", "qkv"):
        for pass_ in ("forward", "backward"):
            run_scheduled(op_name, pass_, config, params, 4, 2, 8, 13)
            run_scheduled(op_name, pass_, config, params, 1, 1, 7, 9)


def test_float32_merge_with_slices_and_heads():
    config = OpConfig(8, 4, "float32")
    params = TiledParams(tile_n=32, threads=64, row_threads=2, slices_per_cta=2,
                         heads_inner=True)
    for pass_ in ("forward", "backward"):
        run_scheduled("attn_flash", pass_, config, params, 4, 3, 4, 9)
        run_scheduled("qkv", pass_, config, params, 4, 1, 5, 8)


def test_the_emulation_sees_a_wrong_schedule():
    """Not vacuous: a tile whose threads skip half the kd vectors leaves NaN (poison) behind."""
    bad = TiledParams(tile_n=64, threads=128, row_threads=4, slices_per_cta=2)
    func = stream_pass(F16, STREAM_OPS["qkv"], "forward", vec=8, name="f")
    script = RULE.apply(func, "forward", F16, bad, 8, 8).script()
    assert "T.thread_binding(128" in script
    kernel = emulate(tvm.script.from_source(script.replace(
        'T.thread_binding(128, thread="threadIdx.x")', 'T.thread_binding(64, thread="threadIdx.x")',
        1)))
    shapes = STREAM_OPS["qkv"].kernel_shapes("forward", 1, 64, 2, 32)
    out = torch.full(shapes["merge"], float("nan"), dtype=torch.float16)
    kernel(inputs(shapes["p"], torch.float16, "cpu"), out, 8)
    assert torch.isnan(out).any()


# ----------------------------------------------------------------- golden TIR, params, checks
@pytest.mark.parametrize("name", list(PARAM_CASES))
def test_scheduled_tir_with_params_matches_the_golden_file(name):
    expected = tvm.script.from_source(golden_param_path(name).read_text())
    tvm.ir.assert_structural_equal(scheduled_with(name).with_attr("global_symbol", None),
                                   expected.with_attr("global_symbol", None),
                                   map_free_vars=True)


def test_slices_share_one_tile_and_keep_a_slice_per_cta_row_at_one():
    """k slices: a [k, kd, tile_n] tile, B*nh*S/k CTA rows, the slices' tiles padded apart."""
    func = stream_pass(F16, STREAM_OPS["qkv"], "forward", vec=8, name="f")
    script = RULE.apply(func, "forward", F16, SETS["streams2"], 8, 8).script()
    assert "(1, 1, 2, 32, 64)" in script and "strides=(4624, 4624, 2312, 72, 1)" in script
    assert 'T.thread_binding(B * 4, thread="blockIdx.y")' in script  # 2 heads x 4 streams / 2
    heads = RULE.apply(func, "forward", F16, SETS["heads2"], 8, 8).script()
    assert "(1, 2, 1, 32, 80)" in heads


def test_new_options_at_their_defaults_leave_stored_params_and_digests_as_they_were():
    config = OpConfig(32, 4, "float16")
    default = RULE.default_params(config)
    assert set(params_as_dict(default)) == {"tile_n", "threads", "row_threads", "vec_bytes",
                                            "pad_bytes"}
    # the rule's default for a family op (attn has its own params since v12: given explicitly)
    assert BuildRequest(config, "tiled", default, op="attn").stem == \
        "kd32_nh4_float16/attn-tiled-7a4df693"
    stored = params_as_dict(SETS["heads2"])
    assert stored["slices_per_cta"] == 2 and stored["heads_inner"] is True
    assert RULE.params_from_dict(stored) == SETS["heads2"]


def test_params_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="row_threads\\*slices_per_cta"):
        RULE.check_params(F16, TiledParams(tile_n=64, threads=128, row_threads=4,
                                           slices_per_cta=3))
    with pytest.raises(ValueError, match="slices_per_cta=0"):
        RULE.check_params(F16, TiledParams(tile_n=64, threads=128, slices_per_cta=0))
    func = stream_pass(F16, STREAM_OPS["attn"], "forward", vec=8, name="f")
    three = TiledParams(tile_n=64, threads=192, row_threads=4, slices_per_cta=3)
    with pytest.raises(ValueError, match="neither a divisor of the streams"):
        RULE.apply(func, "forward", F16, three, 8, 8)  # attn has 2 streams: 3 is not whole heads
    qkv = stream_pass(F16, STREAM_OPS["qkv"], "forward", vec=8, name="f")
    with pytest.raises(ValueError, match="nor whole heads dividing 2 heads"):
        RULE.apply(qkv, "forward", F16, TiledParams(tile_n=64, threads=384, row_threads=4,
                                                    slices_per_cta=12), 8, 8)
    with pytest.raises(ValueError, match="does not divide the heads"):
        RULE.apply(func, "forward", F16, TiledParams(tile_n=64, threads=192, row_threads=4,
                                                     slices_per_cta=3, heads_inner=True), 8, 8)


def test_the_register_stage_issues_a_threads_loads_before_its_first_tile_store():
    """What ``stage_loads`` is for, in the CUDA source: without it the second 16-byte load
    comes after the first one's stores into the shared tile (so it waits for that data)."""
    from psa_tvm.compiler.lower import lower_cuda

    config = OpConfig(32, 6, "float16")
    func = stream_pass(config, STREAM_OPS["qkv_grad_cudnn"], "forward", vec=8, name="k")
    own = TiledParams(tile_n=64, threads=128, row_threads=4, slices_per_cta=2,
                      heads_inner=True, group_pad_bytes=32)
    for staged in (False, True):
        params = replace(own, stage_loads=staged)
        source = lower_cuda({"k": RULE.apply(func, "forward", config, params, 8, 8)}).source
        body = source.index("\n", source.index("__shared__"))  # past the tile's declaration
        fill = source[body:source.index("__syncthreads()")]
        loads = [fill.index(f"*(uint4*)({t}_ptr") for t in ("dq", "dk", "dv")]
        last_load = max(fill.rindex(f"*(uint4*)({t}_ptr") for t in ("dq", "dk", "dv"))
        first_store = fill.index("merge_shared_ptr[")
        assert fill.count("*(uint4*)(dq_ptr") == 4  # 64 positions x 2 heads x 32 / 8 / 128
        assert (last_load < first_store) == staged, staged
        assert min(loads) < first_store


def test_the_coalesced_stage_loads_consecutive_positions_per_warp_instruction():
    """``stage_coalesced``: still every load of a thread before its first tile store, but a
    warp's load instruction reads consecutive positions (thread t: position t / row_threads)
    where the adjacent order gives thread t positions 4 apart (t / row_threads * 4)."""
    from psa_tvm.compiler.compute import merge_forward
    from psa_tvm.compiler.lower import lower_cuda

    config = OpConfig(32, 4, "float16")
    func = merge_forward(config, vec=8, name="k")
    staged = TiledParams(tile_n=256, threads=256, row_threads=4, stage_loads=True)
    fills = {}
    for coalesced in (False, True):
        params = replace(staged, stage_coalesced=coalesced)
        source = lower_cuda({"k": RULE.apply(func, "forward", config, params, 8, 8)}).source
        body = source.index("\n", source.index("__shared__"))
        fill = source[body:source.index("__syncthreads()")]
        assert fill.rindex("*(uint4*)(lo_ptr") < fill.index("out_shared_ptr[")
        assert fill.count("*(uint4*)(lo_ptr") == 4  # 256 positions x 32 / 8 / 256 threads
        fills[coalesced] = fill
    # kd = 32 halves a position: thread t's first vector at t*8 (consecutive) or (t>>2)*128
    assert "((int)threadIdx.x) * 8)" in fills[True]
    assert "(((int)threadIdx.x) >> 2) * 128)" in fills[False]
    with pytest.raises(ValueError, match="needs stage_loads"):
        RULE.check_params(config, TiledParams(stage_coalesced=True))


def test_narrower_kernels_take_the_narrow_tile_and_threads():
    """``narrow_tile_n``/``narrow_threads``: the kernels whose N side is narrower than
    ``vec_bytes`` run their own tile and CTA size, the full-width ones the main params; a
    narrow set that does not fit is refused by name before anything is scheduled."""
    from psa_tvm.compiler.compute import merge_forward
    from psa_tvm.compiler.lower import lower_cuda

    config = OpConfig(32, 4, "float16")
    params = TiledParams(tile_n=256, threads=256, row_threads=4, stage_loads=True,
                         narrow_tile_n=128, narrow_threads=128)
    assert params.for_variant(2, 8) is params
    assert params.for_variant(2, 4) == TiledParams(tile_n=128, threads=128, row_threads=4,
                                                   stage_loads=True)
    assert TiledParams().for_variant(2, 1) == TiledParams()
    for vec, threads in ((8, 256), (4, 128), (1, 128)):
        func = merge_forward(config, vec=vec, name="k")
        source = lower_cuda({"k": RULE.apply(func, "forward", config, params, vec, 8)}).source
        assert f"__launch_bounds__({threads})" in source, vec
    assert "narrow_tile_n" not in params_as_dict(TiledParams())  # digests of older builds
    for bad, match in ((replace(params, narrow_tile_n=100), "tile_n=100"),
                       (replace(params, narrow_threads=-1), "narrow_threads must be >= 0")):
        with pytest.raises(ValueError, match=match):
            RULE.check_params(config, bad)


def test_group_pads_that_do_not_fit_are_refused():
    for params, match in (
            (TiledParams(tile_n=64, threads=128, row_threads=4, group_pad_bytes=8),
             "multiple of 16"),
            (TiledParams(tile_n=32, threads=128, row_threads=4, group_pad_bytes=32),
             "tile_n=32 > threads/row_threads")):
        with pytest.raises(ValueError, match=match):
            RULE.check_params(F16, params)


def test_the_cta_grid_fits_every_op():
    for nh in (4, 6):
        config = OpConfig(32, nh, "float16")
        for op_name, op in STREAM_OPS.items():
            grid = [RULE.params_from_dict(p)
                    for p in layout_tune.cta_candidate_params(config, op_name)]
            assert len(grid) == len(set(grid)) and 16 <= len(grid) <= 22
            assert RULE.default_params(config) in grid
            for params in grid:
                RULE.check_params(config, params)
                grouped = nh if params.heads_inner else op.num_streams
                assert grouped % params.slices_per_cta == 0
    assert layout_tune.params_key({"tile_n": 80, "threads": 160, "row_threads": 4,
                                   "pad_bytes": 16, "slices_per_cta": 2,
                                   "heads_inner": True}) == "t80/160/r4/p16/k2/h"


def test_a_tile_that_is_no_power_of_two_plans_on_the_cpu(tmp_path):
    """The grid of a tile of 80 positions is a truncating division in the manifest
    (``T.Div(NV + 9, 10) + ...``); the run time evaluates it, and a CTA row holds k slices."""
    from psa_tvm.compiler.artifact import build_artifacts
    from psa_tvm.runtime.manifest import Manifest
    from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp, StreamDims
    from psa_tvm.runtime.tensors import TensorInfo

    config = OpConfig(32, 4, "float16")
    params = TiledParams(tile_n=80, threads=160, row_threads=4, slices_per_cta=2)
    build_artifacts([BuildRequest(config, "tiled", params, op="qkv")], tmp_path, ["sm_90"],
                    native=False)
    build = Manifest.load(tmp_path).find(config, "tiled", op="qkv")
    assert any("T.Div" in k.grid[0] for k in build.kernels)
    op = PsaStreamRuntimeOp("qkv", 32, 4, "float16", artifacts=tmp_path)
    for n, tiles in ((400, 5), (1600, 20), (408, 6), (6, 1)):
        dims = StreamDims(3, n)
        shapes = op.kernel_shapes("forward", dims)
        infos = {name: TensorInfo((1 << 20) + i * (1 << 40), shape, None, "float16", "cuda", 0)
                 for i, (name, shape) in enumerate(shapes.items())}
        plan = op.plan("forward", infos, dims)
        assert plan.grid == (tiles, 3 * 4 * 4 // 2, 1) and plan.block == (160, 1, 1)


# ------------------------------------------------------------------ the family ops' own defaults
def test_listed_ops_are_built_with_their_own_params_where_they_fit():
    from psa_tvm.compiler.family_defaults import FAMILY_TILED, FAMILY_TILED_HEADS, family_params

    assert set(FAMILY_TILED) == set(STREAM_OPS)
    for op, listed in FAMILY_TILED.items():
        for dtype in ("float16", "bfloat16"):
            for nh in (2, 4, 6, 8):
                config = OpConfig(32, nh, dtype)
                own = FAMILY_TILED_HEADS.get((op, nh), listed)  # a head count's own set first
                assert family_params(op, config) == own
                assert BuildRequest(config, "tiled", op=op).resolved_params() == own
        own = listed
        # untested dtype; kd = 16 is two vectors, which row_threads=4 does not fit
        misfits = [OpConfig(32, 4, "float32")] + [OpConfig(16, 4, "float16")] * (
            own.row_threads == 4)
        for config in misfits:
            assert family_params(op, config) is None
            assert BuildRequest(config, "tiled", op=op).resolved_params() \
                == RULE.default_params(config)
    # heads_inner with two heads per CTA needs an even nh; two streams per CTA do not
    for op in ("qkv_grad_flash", "attn_flash", "qkv_grad_cudnn"):
        assert family_params(op, OpConfig(32, 3, "float16")) is None
    for op in ("qkv", "attn"):
        assert family_params(op, OpConfig(32, 3, "float16")) == FAMILY_TILED[op]
    config = OpConfig(32, 4, "float16")
    assert BuildRequest(config, "tiled", op="merge").resolved_params() \
        == RULE.default_params(config)
    assert BuildRequest(config, "tiled", SETS["tile80"], op="qkv_grad_flash") \
        .resolved_params() == SETS["tile80"]  # explicit params win


def test_a_pass_with_a_set_of_its_own_is_built_with_it():
    """The two-pass ops' scatters take FAMILY_TILED_PASS's sets; the gathers keep the op's; the
    stored params and digests say so, and builds without per-pass sets keep their digests."""
    from psa_tvm.compiler.family_defaults import FAMILY_TILED, FAMILY_TILED_PASS

    assert {op for op, _ in FAMILY_TILED_PASS} == {"attn", "attn_flash", "qkv"}
    for (op, pass_), own in FAMILY_TILED_PASS.items():
        config = OpConfig(32, 4, "bfloat16")
        request = BuildRequest(config, "tiled", op=op)
        by_pass = request.resolved_pass_params()
        assert by_pass[pass_] == own and own != FAMILY_TILED[op]
        assert all(p == FAMILY_TILED[op] for q, p in by_pass.items() if q != pass_)
        assert request.own_pass_params() == {pass_: params_as_dict(own)}
        assert request.stem != BuildRequest(config, "tiled", FAMILY_TILED[op], op=op).stem
        # where the op's set does not fit, neither does the pass's
        assert BuildRequest(OpConfig(32, 4, "float32"), "tiled", op=op).own_pass_params() == {}
        # explicit params are every pass's, unless a pass is given its own
        explicit = BuildRequest(config, "tiled", SETS["tile80"], op=op)
        assert set(explicit.resolved_pass_params().values()) == {SETS["tile80"]}
        both = BuildRequest(config, "tiled", SETS["tile80"], op=op, pass_params=((pass_, own),))
        assert both.resolved_pass_params()[pass_] == own
    config = OpConfig(32, 4, "float16")
    assert BuildRequest(config, "tiled", op="qkv_grad_flash").own_pass_params() == {}
    with pytest.raises(ValueError, match="pass_params: op 'qkv_grad_flash' has passes"):
        BuildRequest(config, "tiled", op="qkv_grad_flash",
                     pass_params=(("backward", SETS["tile80"]),)).resolved_pass_params()


def test_passes_of_one_build_must_agree_on_the_vector_width():
    from dataclasses import replace

    from psa_tvm.compiler.artifact import schedule_module

    config = OpConfig(32, 4, "float16")
    own = BuildRequest(config, "tiled", op="attn").resolved_params()
    narrow = replace(own, vec_bytes=8)
    with pytest.raises(ValueError, match="pass_params: every pass needs the same vector width"):
        schedule_module(BuildRequest(config, "tiled", op="attn",
                                     pass_params=(("backward", narrow),)))


def test_the_manifest_reads_a_pass_s_own_params():
    from pathlib import Path

    from psa_tvm.runtime.manifest import BuildSpec

    entry = {"key_dim": 32, "num_heads": 4, "dtype": "float16", "op": "attn",
             "schedule": "tiled", "schedule_params": {"tile_n": 64},
             "pass_params": {"backward": {"tile_n": 32}}, "vector_width": 8, "archs": ["sm_90"],
             "source": "x.cu", "binaries": [], "kernels": []}
    build = BuildSpec.from_json(Path("/a"), entry)
    assert build.params_for("backward") == {"tile_n": 32}
    assert build.params_for("forward") == {"tile_n": 64}
    older = BuildSpec.from_json(Path("/a"), {k: v for k, v in entry.items() if k != "pass_params"})
    assert older.params_for("backward") == {"tile_n": 64}


def _own_default_cases() -> list[tuple[str, str, str, int]]:
    """(op, pass, index dtype, nh): every op's own set at nh 2, a head count's own at its nh."""
    from psa_tvm.compiler.family_defaults import FAMILY_TILED, FAMILY_TILED_HEADS

    heads = [(op, 2) for op in FAMILY_TILED] + list(FAMILY_TILED_HEADS)
    return [(op, pass_, index_dtype, nh) for op, nh in heads
            for pass_ in STREAM_OPS[op].passes for index_dtype in ("int32", "int64")]


@pytest.mark.parametrize(("op_name", "pass_", "index_dtype", "nh"), _own_default_cases())
def test_every_variant_of_an_own_default_is_bit_exact(op_name, pass_, index_dtype, nh):
    """Every (vec_kd, vec) kernel a build with the op's own params (the pass's own, where it has
    them) holds (the GPU runs timed only the 16-byte int32 ones), at an N with a partial tile;
    scalar N sides also at an odd N."""
    from psa_tvm.compiler.artifact import variant_widths

    op = STREAM_OPS[op_name]
    config = OpConfig(32, nh, "float16")
    params = BuildRequest(config, "tiled", op=op_name).resolved_pass_params()[pass_]
    names = op.tensor_names(pass_)
    for vec_kd, vec in variant_widths(RULE.vector_width(config, params), index_dtype):
        func = stream_pass(config, op, pass_, vec=vec, index_dtype=index_dtype, name="f")
        kernel = emulate(RULE.apply(func, pass_, config, params, vec, vec_kd))
        for height, width in ((8, 13),) + (((7, 9),) if vec == 1 else ()):
            n = height * width
            shapes = op.kernel_shapes(pass_, 2, n, nh, 32)
            tensors = {name: inputs(shapes[name], torch.float16, "cpu", seed=i)
                       for i, name in enumerate(names[:-1])}
            out = torch.full(shapes[names[-1]], float("nan"), dtype=torch.float16)
            kernel(*tensors.values(), out, n // vec)
            expected = _torch_reference(op, pass_, tensors, 2, n, nh, 32, height, width)
            assert bitwise_equal(out, expected), (op_name, pass_, vec_kd, vec, index_dtype, n)


def test_the_tuning_table_compares_with_what_an_untuned_build_uses(tmp_path, monkeypatch):
    """defaults.json records an op's own params ("<tag>/<op>") beside the rule's default, and
    the table's "default" column reads them."""
    import psa_tvm.compiler.artifact as artifact

    monkeypatch.setattr(artifact, "build_artifacts", lambda *a, **k: None)
    for name in ("variant_widths", "INDEX_DTYPES"):  # build() narrows them for its process
        monkeypatch.setattr(artifact, name, getattr(artifact, name))
    layout_tune.build(tmp_path, [4], ["float16"], ["qkv_grad_flash", "attn"], 1, grid="cta")
    defaults = json.loads((tmp_path / "defaults.json").read_text())
    tag = OpConfig(32, 4, "float16").tag
    assert set(defaults) == {tag, f"{tag}/qkv_grad_flash", f"{tag}/attn", f"{tag}/attn/backward"}
    own = BuildRequest(OpConfig(32, 4, "float16"), "tiled", op="qkv_grad_flash").resolved_params()
    assert layout_tune.default_key(defaults, "qkv_grad_flash", 4, "bfloat16") \
        == layout_tune.params_key(params_as_dict(own)) == "t64/256/r4/p16/k2/h/g32/s"
    assert layout_tune.default_key(defaults, "attn", 4, "float16") == "t64/256/r2/p16/k2/s"
    assert layout_tune.default_key(defaults, "attn", 4, "float16", "forward") \
        == "t64/256/r2/p16/k2/s"
    assert layout_tune.default_key(defaults, "attn", 4, "float16", "backward") \
        == "t64/256/r4/p16/k2/g32"
