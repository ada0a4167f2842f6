"""The TVM-free run-time half on the CPU: RuntimeOp planning (kernel variant, grid, block, packed
arguments) against the manifest, with fake ``(pointer, shape)`` pairs; no GPU, no allocation."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from psa_tvm import PsaMergeAttnRuntimeOp, RecordingVisitor, reference
from psa_tvm.config import INT32_MAX, OpConfig
from psa_tvm.runtime.manifest import Manifest, evaluate
from tests.helpers import rule_n_side_bytes, shifted_backward_at_aligned_n

KD, NH = 32, 4
C = 2 * NH * KD
# Fake device pointers: 16-byte aligned and far apart (the largest tensor below is < 2**33 B).
P_LO, P_HI, P_OUT = 1 << 36, 2 << 36, 3 << 36
P_G, P_DLO, P_DHI = 4 << 36, 5 << 36, 6 << 36
# (B, H, W): N tails (not a multiple of any vector width), multiples of 8, B=1, H=W=1.
SHAPES = ((1, 1, 1), (1, 7, 13), (2, 20, 20), (3, 16, 16), (4, 5, 8), (2, 3, 3), (5, 33, 17))
OPS = (("float16", "tiled"), ("float32", "tiled"), ("float16", "rowwise"))


@pytest.fixture(scope="module")
def artifacts(small_artifacts):
    return small_artifacts


@pytest.fixture(scope="module")
def manifest(artifacts):
    return Manifest.load(artifacts)


@pytest.fixture(scope="module")
def ops(artifacts):
    return {(dtype, schedule): PsaMergeAttnRuntimeOp(KD, NH, dtype, schedule=schedule,
                                                     artifacts=artifacts, arch="sm_90")
            for dtype, schedule in OPS}


def fwd_pairs(batch, n, lo=P_LO, hi=P_HI):
    shape = (batch * NH, n, KD)
    return [(lo, shape), (hi, shape)]


def grad_pair(batch, height, width, ptr=P_G):
    return (ptr, (batch, C, height, width))


def bwd_outputs(batch, n, d_lo=P_DLO, d_hi=P_DHI):
    return [(d_lo, (batch * NH, n, KD)), (d_hi, (batch * NH, n, KD))]


def expected_kernel(build, pass_, n, *, alignment=16, index_dtype="int32", numel=None):
    """The variant the launcher should pick (docs/native.md's rule): among the kernels whose
    ``vec`` divides N and whose widest access the pointers' alignment (bytes) allows, the one
    maximising ``(vec_kd, N-side bytes)``, a shifted kernel counting as 6 bytes (between the
    8-byte and the 4-byte N side), its second record (16-bit backward, N % 8 == 0) as 17."""
    itemsize = build.config.itemsize
    variants = [k for k in build.kernels if k.pass_ == pass_ and k.index_dtype == index_dtype]
    assert any(k.vec == k.vec_kd == 1 for k in variants), "every build needs a scalar fallback"
    fits = [k for k in variants
            if n % k.vec == 0 and alignment % (max(k.vec, k.vec_kd) * itemsize) == 0
            and (numel is None or numel >= k.min_numel)]
    return max(fits, key=lambda k: (k.vec_kd, rule_n_side_bytes(k, itemsize)))


def manifest_dims(kernel, batch, n):
    symbols = {"B": batch, "N": n} if kernel.shifted else {"B": batch, "NV": n // kernel.vec}
    assert set(kernel.symbols) == set(symbols)
    return (tuple(evaluate(e, symbols) for e in kernel.grid),
            tuple(evaluate(e, symbols) for e in kernel.block))


def check_covers_the_work(build, kernel, grid, block, batch, n):
    """The launch covers every (b, h, n) exactly as the schedule lays it out."""
    if kernel.shifted:  # compiler/shifted.py: a CTA row per (b, h, lo/hi), tiles along N
        tile_n = next(t for t in range(1, 1025)  # the largest N one CTA column covers
                      if evaluate(kernel.grid[0], {"N": t + 1, "B": 1}) == 2)
        assert grid[1] == batch * NH * 2
        assert grid[0] * tile_n >= n > (grid[0] - 1) * tile_n or n == grid[0] == 0
    elif build.schedule == "tiled":
        tile_n = build.schedule_params["tile_n"]
        assert grid[1] == batch * NH * 2  # one CTA row per (b, h, lo/hi)
        assert grid[0] * tile_n >= n > (grid[0] - 1) * tile_n or n == grid[0] == 0
        assert block == (build.schedule_params["threads"], 1, 1)
    else:
        assert grid == (batch * NH * n, 1, 1)
        assert block == (KD, 1, 1)


def source_params(source: str, entry: str) -> list[str]:
    match = re.search(rf'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?{entry}\('
                      r"([^)]*)\)", source)
    assert match, f"{entry} not in the source"
    return [p.split()[-1] for p in match.group(1).split(",")]


# ----------------------------------------------------------------------- grid / block
@pytest.mark.parametrize(("dtype", "schedule"), OPS)
def test_grid_and_block_agree_with_manifest_expressions(ops, manifest, dtype, schedule):
    op = ops[(dtype, schedule)]
    build = manifest.find(OpConfig(KD, NH, dtype), schedule)
    seen_vecs = set()
    for batch, height, width in SHAPES:
        n = height * width
        where = f"{dtype} {schedule} B={batch} H={height} W={width}"
        kernel = expected_kernel(build, "forward", n, numel=batch * C * n)
        seen_vecs.add(kernel.vec)
        grid, block = manifest_dims(kernel, batch, n)
        assert op.grid(fwd_pairs(batch, n)) == grid, where
        assert op.block(fwd_pairs(batch, n)) == block, where
        assert op.plan_forward(fwd_pairs(batch, n)).kernel.entry == kernel.entry, where
        check_covers_the_work(build, kernel, grid, block, batch, n)

        bkernel = expected_kernel(build, "backward", n, numel=batch * C * n)
        bgrid, bblock = manifest_dims(bkernel, batch, n)
        assert op.backward_grid(grad_pair(batch, height, width)) == bgrid, where
        assert op.backward_block(grad_pair(batch, height, width)) == bblock, where
        check_covers_the_work(build, bkernel, bgrid, bblock, batch, n)
    # The shapes exercise both the vectorized variant and a tail variant (shifted where built).
    assert seen_vecs == {1, build.vector_width}


@pytest.mark.parametrize(("dtype", "width"), [("float16", 8), ("float32", 4)])
def test_tail_narrows_only_the_n_side(ops, manifest, dtype, width):
    op = ops[(dtype, "tiled")]
    assert manifest.find(OpConfig(KD, NH, dtype), "tiled").vector_width == width
    for n in (width, 5 * width, 400 - 400 % width):
        assert op.plan_forward(fwd_pairs(2, n)).kernel.vec == width
        assert op.plan_backward(grad_pair(2, n, 1)).kernel.vec == width
    for n in (1, width - 1, 5 * width + 1, 91, 300, 6):
        along_n = min(width, n & -n)  # the largest power of two dividing N, up to the width
        for plan in (op.plan_forward(fwd_pairs(2, n)), op.plan_backward(grad_pair(2, n, 1))):
            # Calls under 2**21 merged elements keep the plain kernels.
            assert (plan.kernel.vec_kd, plan.kernel.vec, plan.kernel.shifted) == (
                width, along_n, False), n
    # From 2**21 elements on, an N side under 8 bytes is the shifted kernel's, and so is a
    # 16-bit backward's full-width N side.
    for n in (1073, 91, 300, 400):
        batch = -(-(1 << 21) // (C * n))
        along_n = min(width, n & -n)
        shifted = along_n * (16 // width) < 8
        plan = op.plan_forward(fwd_pairs(batch, n))
        assert plan.kernel.vec_kd == width and plan.kernel.shifted == shifted, n
        plan = op.plan_backward(grad_pair(batch, n, 1))
        aligned = shifted_backward_at_aligned_n(op.builds["backward"])
        shifted = shifted or (aligned and along_n == width)
        assert plan.kernel.vec_kd == width and plan.kernel.shifted == shifted, n


def test_bare_shapes_plan_like_aligned_pairs(ops):
    op = ops[("float16", "tiled")]
    shape = (2 * NH, 400, KD)
    assert op.grid([shape, shape]) == op.grid(fwd_pairs(2, 400))
    assert op.plan_forward([shape, shape]).kernel == op.plan_forward(fwd_pairs(2, 400)).kernel
    assert op.backward_grid((2, C, 20, 20)) == op.backward_grid(grad_pair(2, 20, 20))


# ----------------------------------------------------------------------- packed arguments
@pytest.mark.parametrize(("dtype", "schedule"), OPS)
@pytest.mark.parametrize(("batch", "height", "width"), [(2, 20, 20), (1, 7, 13), (3, 1, 1)])
def test_pack_args_order_pointers_and_symbols(ops, manifest, dtype, schedule, batch, height,
                                              width):
    op = ops[(dtype, schedule)]
    build = manifest.find(OpConfig(KD, NH, dtype), schedule)
    n = height * width
    pointers = {"lo": P_LO, "hi": P_HI, "out": P_OUT, "g": P_G, "dlo": P_DLO, "dhi": P_DHI}

    for pass_ in ("forward", "backward"):
        kernel = expected_kernel(build, pass_, n, numel=batch * C * n)
        visitor = RecordingVisitor()
        if pass_ == "forward":
            op.pack_args(fwd_pairs(batch, n), (P_OUT, (batch, C, height, width)), visitor)
        else:
            op.pack_backward_args(grad_pair(batch, height, width), bwd_outputs(batch, n),
                                  visitor)
        names = [name for _, name, _ in visitor.args]
        assert names == [p.name for p in kernel.params]
        source = op.forward_source() if pass_ == "forward" else op.backward_source()
        assert names == source_params(source, kernel.entry)
        expected_values = {"B": batch, "NV": n // kernel.vec, "N": n}
        for (kind, name, value), param in zip(visitor.args, kernel.params, strict=True):
            if param.kind == "ptr":
                assert (kind, value) == ("ptr", pointers[param.tensor]), name
            else:
                assert (kind, value) == ("int32", expected_values[name]), name
        assert {p.tensor for p in kernel.params if p.kind == "ptr"} == (
            {"lo", "hi", "out"} if pass_ == "forward" else {"g", "dlo", "dhi"})


def test_pack_args_of_torch_tensors_and_numpy_arrays(ops):
    op = ops[("float16", "tiled")]
    lo, hi = (torch.ones(2 * NH, 400, KD, dtype=torch.float16) for _ in range(2))
    out = torch.empty(2, C, 20, 20, dtype=torch.float16)
    visitor = RecordingVisitor()
    op.pack_args([lo, hi], out, visitor)
    pointers = {name: value for kind, name, value in visitor.args if kind == "ptr"}
    assert pointers == {"lo_ptr": lo.data_ptr(), "hi_ptr": hi.data_ptr(),
                        "out_ptr": out.data_ptr()}

    np_lo, np_hi = (np.ones((2 * NH, 400, KD), dtype=np.float16) for _ in range(2))
    np_out = np.empty((2, C, 20, 20), dtype=np.float16)
    visitor = RecordingVisitor()
    op.pack_args([np_lo, np_hi], np_out, visitor)
    pointers = {name: value for kind, name, value in visitor.args if kind == "ptr"}
    assert pointers == {"lo_ptr": np_lo.ctypes.data, "hi_ptr": np_hi.ctypes.data,
                        "out_ptr": np_out.ctypes.data}


@pytest.mark.parametrize("misaligned", ["lo", "hi", "out"])
def test_misaligned_pointer_selects_the_scalar_kernel(ops, manifest, misaligned):
    op = ops[("float16", "tiled")]
    build = manifest.find(OpConfig(KD, NH, "float16"), "tiled")
    shift = {"lo": 0, "hi": 0, "out": 0, misaligned: 8}  # element- but not 16-byte aligned
    inputs = fwd_pairs(2, 400, P_LO + shift["lo"], P_HI + shift["hi"])
    out = (P_OUT + shift["out"], (2, C, 20, 20))
    aligned_plan = op.plan_forward(fwd_pairs(2, 400), (P_OUT, (2, C, 20, 20)))
    assert aligned_plan.kernel.vec == build.vector_width > 1
    plan = op.plan_forward(inputs, out)
    assert plan.kernel == expected_kernel(build, "forward", 400, alignment=8)
    assert (plan.kernel.vec_kd, plan.kernel.vec) == (4, 4)  # 8-byte accesses on both sides
    visitor = RecordingVisitor()
    op.pack_args(inputs, out, visitor)
    assert ("int32", "NV", 100) in visitor.args  # NV = N / 4
    odd = op.plan_forward(fwd_pairs(2, 400, P_LO + 2), out)  # 2-byte aligned: scalar
    assert (odd.kernel.vec_kd, odd.kernel.vec) == (1, 1)
    assert plan.grid == manifest_dims(plan.kernel, 2, 400)[0]


@pytest.mark.parametrize("misaligned", ["g", "dlo", "dhi"])
def test_misaligned_backward_pointer_selects_the_scalar_kernel(ops, misaligned):
    op = ops[("float32", "tiled")]
    shift = {"g": 0, "dlo": 0, "dhi": 0, misaligned: 4}
    plan = op.plan_backward(grad_pair(2, 20, 20, P_G + shift["g"]),
                            bwd_outputs(2, 400, P_DLO + shift["dlo"], P_DHI + shift["dhi"]))
    assert plan.kernel.vec == 1
    assert op.plan_backward(grad_pair(2, 20, 20), bwd_outputs(2, 400)).kernel.vec > 1


# ----------------------------------------------------------------------- int64 indexing
@pytest.mark.parametrize(("dtype", "schedule"), OPS)
def test_sizes_past_int32_select_the_int64_kernel(ops, manifest, dtype, schedule):
    """lo/hi of 2**31+ elements each: planning only, nothing is allocated."""
    op = ops[(dtype, schedule)]
    build = manifest.find(OpConfig(KD, NH, dtype), schedule)
    batch, height, width = 65, 512, 512
    n = height * width
    assert batch * NH * n * KD > INT32_MAX
    out = (P_OUT, (batch, C, height, width))
    plan = op.plan_forward(fwd_pairs(batch, n), out)
    kernel = expected_kernel(build, "forward", n, index_dtype="int64")
    assert plan.kernel == kernel and kernel.index_dtype == "int64"
    assert plan.grid == manifest_dims(kernel, batch, n)[0]
    visitor = RecordingVisitor()
    op.pack_args(fwd_pairs(batch, n), out, visitor)
    scalars = [(kind, name, value) for kind, name, value in visitor.args if kind != "ptr"]
    assert sorted(scalars) == sorted([("int64", "B", batch), ("int64", "NV", n // kernel.vec)])
    check_covers_the_work(build, kernel, plan.grid, plan.block, batch, n)

    bplan = op.plan_backward(grad_pair(batch, height, width), bwd_outputs(batch, n))
    assert bplan.kernel.index_dtype == "int64"
    assert all(kind in ("ptr", "int64") for kind, _, _ in bplan.args)


def test_int32_to_int64_switch_keeps_a_tile_of_headroom(ops, manifest):
    """int32 kernels are used only while every index, including a tail tile's, fits."""
    from psa_tvm.runtime.plan import INT32_MARGIN as _INT32_MARGIN

    op = ops[("float16", "tiled")]
    build = manifest.find(OpConfig(KD, NH, "float16"), "tiled")
    tile = build.schedule_params["tile_n"] * KD
    assert tile <= _INT32_MARGIN
    largest = (INT32_MAX - _INT32_MARGIN) // C  # B * N with merged numel under the limit
    assert op.plan_forward([(P_LO, (NH, largest, KD))] * 2).kernel.index_dtype == "int32"
    assert op.plan_forward([(P_LO, (NH, largest + 1, KD))] * 2).kernel.index_dtype == "int64"
    assert largest * C + tile <= INT32_MAX


# ----------------------------------------------------------------------- seed surface
def test_launch_counts_and_launch_indices(ops):
    op = ops[("float16", "tiled")]
    inputs, out = fwd_pairs(2, 400), (P_OUT, (2, C, 20, 20))
    assert op.n_launches() == 1 and op.n_backward_launches() == 1
    assert op.has_backward() and op.n_activation_inputs() == 2
    assert op.param_shapes() == [] and op.param_names() == [] and op.param_init_data() == []
    assert op.grid_for_launch(0, inputs) == op.grid(inputs)
    assert op.backward_grid_for_launch(0, grad_pair(2, 20, 20)) == op.backward_grid(
        grad_pair(2, 20, 20))
    direct, indexed = RecordingVisitor(), RecordingVisitor()
    op.pack_args(inputs, out, direct)
    op.pack_args_for_launch(0, inputs, out, indexed)
    assert direct.args == indexed.args and direct.args
    direct, indexed = RecordingVisitor(), RecordingVisitor()
    op.pack_backward_args(grad_pair(2, 20, 20), bwd_outputs(2, 400), direct)
    op.pack_backward_args_for_launch(0, grad_pair(2, 20, 20), bwd_outputs(2, 400), indexed)
    assert direct.args == indexed.args and direct.args
    for bad in (1, -1):
        with pytest.raises(ValueError, match=r"launch.*\[0, 1\)"):
            op.grid_for_launch(bad, inputs)
        with pytest.raises(ValueError, match="launch"):
            op.pack_args_for_launch(bad, inputs, out, RecordingVisitor())
        with pytest.raises(ValueError, match="launch"):
            op.backward_grid_for_launch(bad, grad_pair(2, 20, 20))


@pytest.mark.parametrize(("batch", "height", "width"), [(1, 1, 1), (2, 7, 13), (3, 20, 20)])
def test_concrete_output_shape_and_row_strides(ops, batch, height, width):
    op = ops[("float32", "tiled")]
    shape = (batch * NH, height * width, KD)
    lo, hi = (torch.empty(shape, device="meta") for _ in range(2))
    merged = reference.merge(lo, hi, NH, height, width)
    assert op.compute_concrete_output_shape([shape, shape], (height, width)) == list(
        merged.shape)
    assert op.compute_concrete_output_shape([shape, shape]) == [batch, C, height * width]
    assert op.forward_output_row_stride([shape, shape]) == merged.stride(1)
    assert op.backward_grad_output_row_stride(list(merged.shape)) == merged.stride(1)
    with pytest.raises(ValueError, match="lo"):
        op.compute_concrete_output_shape([(batch * NH + 1, height * width, KD)] * 2)


def test_kernel_name_and_sources(ops, manifest):
    op = ops[("float16", "tiled")]
    plan = op.plan_forward(fwd_pairs(2, 400))
    assert op.kernel_name() == plan.kernel.entry
    assert f"{op.kernel_name()}(" in op.forward_source()
    bplan = op.plan_backward(grad_pair(2, 20, 20))
    assert f"{bplan.kernel.entry}(" in op.backward_source()


def test_kernel_name_matches_the_packed_kernel_for_a_tail(ops):
    op = ops[("float16", "tiled")]
    inputs, output = fwd_pairs(1, 91), (P_OUT, (1, C, 7, 13))
    plan = op.plan_forward(inputs, output)
    assert plan.kernel.vec == 1
    assert op.kernel_name(inputs, output) == plan.kernel.entry
    assert op.kernel_name() != plan.kernel.entry  # no inputs: the main (vector) variant


# ----------------------------------------------------------------------- expressions
def test_evaluate_matches_python_semantics():
    env = {"B": 7, "NV": 91}
    for expr, value in [("NV + 31 >> 5", (91 + 31) >> 5), ("B * T.int64(8)", 56),
                        ("(NV * 4 + 127) // 128", (91 * 4 + 127) // 128), ("B % 3", 1),
                        ("T.int64(256)", 256)]:
        assert evaluate(expr, env) == value, expr
    for bad in ("__import__('os')", "B if NV else 0", "-B", "B / 2", "open('x')"):
        with pytest.raises((ValueError, KeyError)):
            evaluate(bad, env)


@pytest.mark.parametrize("kind", ["max", "min", "cast"])
def test_evaluate_reads_what_tvm_prints(kind):
    from tvm import tirx

    batch = tirx.Var("B", "int32")
    expr, value = {"max": (tirx.max(batch, 65535), 70000), "min": (tirx.min(batch, 65535), 65535),
                   "cast": (tirx.Cast("int64", batch) * 2, 140000)}[kind]
    assert evaluate(str(expr), {"B": 70000}) == value


# ----------------------------------------------------------------------- TVM-free half
_NO_TVM = r"""
import importlib.abc, json, sys

class NoTVM(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tvm":  # tvm_ffi is the run time's ABI: allowed
            raise ImportError(f"TVM is hidden: {name}")
        return None

sys.meta_path.insert(0, NoTVM())
try:
    import tvm  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("the finder did not hide tvm")

import psa_tvm
import psa_tvm.runtime.launcher
import psa_tvm.runtime.manifest
import psa_tvm.runtime.runtime_op
from psa_tvm import PsaMergeAttnRuntimeOp, RecordingVisitor

torch_after_import = "torch" in sys.modules
op = PsaMergeAttnRuntimeOp(32, 4, "float16", schedule="tiled", artifacts=sys.argv[1],
                           arch="sm_90")
shape = (8, 400, 32)
inputs = [(1 << 36, shape), (2 << 36, shape)]
visitor = RecordingVisitor()
op.pack_args(inputs, (3 << 36, (2, 256, 20, 20)), visitor)
grad = (4 << 36, (2, 256, 20, 20))
bvisitor = RecordingVisitor()
op.pack_backward_args(grad, [(5 << 36, shape), (6 << 36, shape)], bvisitor)
print(json.dumps({
    "grid": op.grid(inputs), "block": op.block(inputs), "args": visitor.args,
    "backward_grid": op.backward_grid(grad), "backward_args": bvisitor.args,
    "kernel_name": op.kernel_name(),
    "tvm_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "tvm"),
    "torch_after_import": torch_after_import,
}))
"""


def test_runtime_half_works_with_tvm_hidden(ops, artifacts):
    proc = subprocess.run([sys.executable, "-c", _NO_TVM, str(artifacts)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["tvm_loaded"] == []
    assert got["torch_after_import"] is False  # "importing this package imports neither"

    op = ops[("float16", "tiled")]
    inputs = fwd_pairs(2, 400)
    visitor = RecordingVisitor()
    op.pack_args(inputs, (P_OUT, (2, C, 20, 20)), visitor)
    bvisitor = RecordingVisitor()
    op.pack_backward_args(grad_pair(2, 20, 20), bwd_outputs(2, 400), bvisitor)
    assert tuple(got["grid"]) == op.grid(inputs)
    assert tuple(got["block"]) == op.block(inputs)
    assert tuple(got["backward_grid"]) == op.backward_grid(grad_pair(2, 20, 20))
    assert got["kernel_name"] == op.kernel_name()
    assert [tuple(a) for a in got["args"]] == [tuple(a) for a in visitor.args]
    assert [tuple(a) for a in got["backward_args"]] == [tuple(a) for a in bvisitor.args]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_same_bits_is_bit_for_bit(dtype):
    """reference.same_bits (tune run's exactness check): NaNs of one payload compare equal,
    one flipped bit, -0.0 against 0.0 or another shape does not."""
    a = torch.randn(3, 5, 4).to(dtype)
    a[0, 0, 0] = float("nan")
    assert reference.same_bits(a, a.clone())
    assert reference.same_bits(a.permute(1, 0, 2), a.permute(1, 0, 2).contiguous())
    ints = {2: torch.int16, 4: torch.int32}[a.element_size()]
    flipped = a.clone()
    flipped.view(ints)[1, 2, 3] ^= 1
    assert not reference.same_bits(a, flipped)
    zero = torch.zeros(2, dtype=dtype)
    assert not reference.same_bits(zero, -zero)
    assert not reference.same_bits(a, a[:, :4])
