"""GPU tests: every schedule bit-exact with the reference, canaries intact, and the PyTorch
integration (autograd, torch.compile, CUDA graphs, streams). Run from prebuilt artifacts:

    psa-tvm build --preset tests yolo11 -o .artifacts          # any machine with TVM + nvcc
    PSA_TVM_ARTIFACTS=.artifacts python -m pytest -m gpu        # the GPU host, no TVM needed
"""

from __future__ import annotations

import ctypes
import json
from functools import cache

import pytest
import torch

from psa_tvm import PsaMergeAttnRuntimeOp, RecordingVisitor, reference
from psa_tvm.presets import PRESETS
from tests.helpers import DTYPES, bitwise_equal, inputs, poisoned

pytestmark = pytest.mark.gpu

SCHEDULES = ("rowwise", "tiled")
# (B, H, W): H=W=1, B=1, odd sizes and N that is not a multiple of the tile or the vector.
SHAPES = ((1, 1, 1), (1, 7, 13), (2, 20, 20), (3, 12, 12), (1, 40, 40), (2, 5, 3), (4, 33, 17))


@cache
def runtime_op(artifacts: str, key_dim: int, num_heads: int, dtype: str, schedule: str):
    return PsaMergeAttnRuntimeOp(key_dim, num_heads, dtype, schedule=schedule,
                                 artifacts=artifacts)


def run_forward(op, config, batch, height, width, *, lo_offset=0, out_offset=64, seed=0):
    dtype = DTYPES[config.dtype]
    rows, n = batch * config.num_heads, height * width
    lo = inputs((rows * n * config.key_dim + lo_offset,), dtype, "cuda", seed)[lo_offset:]
    lo = lo.view(rows, n, config.key_dim)
    hi = inputs((rows, n, config.key_dim), dtype, "cuda", seed + 1)
    out = poisoned((batch, config.channels, height, width), dtype, "cuda", out_offset)
    op.launch_forward(lo, hi, out.tensor, torch.cuda.current_stream().cuda_stream,
                      (height, width))
    torch.cuda.synchronize()
    return lo, hi, out


def run_backward(op, config, batch, height, width, *, out_offset=64, seed=0):
    dtype = DTYPES[config.dtype]
    grad = inputs((batch, config.channels, height, width), dtype, "cuda", seed)
    half = (batch * config.num_heads, height * width, config.key_dim)
    d_lo, d_hi = poisoned(half, dtype, "cuda", out_offset), poisoned(half, dtype, "cuda",
                                                                       out_offset)
    op.launch_backward(grad, d_lo.tensor, d_hi.tensor, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return grad, d_lo, d_hi


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("config", PRESETS["tests"], ids=lambda c: c.tag)
def test_every_schedule_is_bit_exact_with_canaries(gpu_artifacts, schedule, config):
    op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype, schedule)
    for batch, height, width in SHAPES:
        where = f"{schedule} {config.tag} B={batch} H={height} W={width}"
        lo, hi, out = run_forward(op, config, batch, height, width)
        expected = reference.merge(lo, hi, config.num_heads, height, width)
        assert bitwise_equal(out.tensor, expected), f"forward wrong: {where}"
        assert out.canaries_intact(), f"forward wrote outside its output: {where}"

        grad, d_lo, d_hi = run_backward(op, config, batch, height, width)
        ref_lo, ref_hi = reference.merge_backward(grad, config.num_heads, config.key_dim)
        assert bitwise_equal(d_lo.tensor, ref_lo), f"backward d_lo wrong: {where}"
        assert bitwise_equal(d_hi.tensor, ref_hi), f"backward d_hi wrong: {where}"
        assert d_lo.canaries_intact() and d_hi.canaries_intact(), f"backward overran: {where}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_pointers_fall_back_to_the_scalar_kernel(gpu_artifacts, dtype):
    config = next(c for c in PRESETS["tests"] if c.dtype == dtype and c.key_dim == 32)
    op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, dtype, "tiled")
    lo, hi, out = run_forward(op, config, 2, 20, 20, lo_offset=1, out_offset=65)
    plan = op.plan_forward([lo, hi], out.tensor, (20, 20))
    assert plan.kernel.vec == 1
    assert bitwise_equal(out.tensor, reference.merge(lo, hi, config.num_heads, 20, 20))
    assert out.canaries_intact()
    _, d_lo, d_hi = run_backward(op, config, 2, 20, 20, out_offset=65)
    assert d_lo.canaries_intact() and d_hi.canaries_intact()


def test_seeded_fuzz_sweep(gpu_artifacts):
    """Random valid configurations and shapes from the built set, against the reference."""
    gen = torch.Generator().manual_seed(1234)
    configs = PRESETS["tests"]
    for case in range(60):
        config = configs[int(torch.randint(len(configs), (1,), generator=gen))]
        schedule = SCHEDULES[case % 2]
        batch, height, width = (int(x) for x in torch.randint(1, 24, (3,), generator=gen))
        op = runtime_op(str(gpu_artifacts), config.key_dim, config.num_heads, config.dtype,
                        schedule)
        lo, hi, out = run_forward(op, config, batch, height, width, seed=case)
        where = f"case {case}: {schedule} {config.tag} B={batch} H={height} W={width}"
        assert bitwise_equal(out.tensor, reference.merge(lo, hi, config.num_heads, height,
                                                         width)), where
        assert out.canaries_intact(), where


# ----------------------------------------------------------------------- external launcher
class _CtypesVisitor:
    """Packs visited arguments into a ``void**`` array, as a C runtime would."""

    def __init__(self):
        self.values = []

    def visit_ptr(self, value, name):
        self.values.append(ctypes.c_void_p(value))

    def visit_i32(self, value, name):
        self.values.append(ctypes.c_int32(value))

    def visit_i64(self, value, name):
        self.values.append(ctypes.c_int64(value))

    def visit_f32(self, value, name):
        self.values.append(ctypes.c_float(value))

    def array(self):
        return (ctypes.c_void_p * len(self.values))(*[ctypes.addressof(v) for v in self.values])


def _external_launch(binary: bytes, entry: str, grid, block, visitor: _CtypesVisitor):
    from cuda.bindings import driver

    def ok(result):
        assert result[0] == driver.CUresult.CUDA_SUCCESS, result[0]
        return result[1] if len(result) == 2 else None

    torch.cuda.init()
    module = ok(driver.cuModuleLoadData(binary))
    func = ok(driver.cuModuleGetFunction(module, entry.encode()))
    array = visitor.array()
    stream = torch.cuda.current_stream().cuda_stream
    ok(driver.cuLaunchKernel(func, *grid, *block, 0, stream, ctypes.addressof(array), 0))
    torch.cuda.synchronize()
    ok(driver.cuModuleUnload(module))


@pytest.mark.parametrize("dtype", DTYPES)
def test_minimal_external_launcher_from_manifest(gpu_artifacts, dtype):
    """Only the manifest, the binary and the RuntimeOp's grid/block/pack_args are used."""
    kd, nh, batch, height, width = 32, 4, 2, 20, 20
    op = PsaMergeAttnRuntimeOp(kd, nh, dtype, schedule="tiled", artifacts=gpu_artifacts)
    manifest = json.loads((gpu_artifacts / "manifest.json").read_text())
    # The op names its builds by their source; the manifest entry gives binary and kernels.
    entries = {b["source"]: b for b in manifest["builds"]}
    fwd_build, bwd_build = (entries[str(op.builds[p].source.relative_to(gpu_artifacts))]
                            for p in ("forward", "backward"))
    binary = (gpu_artifacts / fwd_build["binaries"][0]["path"]).read_bytes()

    lo = inputs((batch * nh, height * width, kd), DTYPES[dtype], "cuda", 1)
    hi = inputs((batch * nh, height * width, kd), DTYPES[dtype], "cuda", 2)
    out = poisoned((batch, 2 * nh * kd, height, width), DTYPES[dtype], "cuda")
    visitor = _CtypesVisitor()
    op.pack_args([lo, hi], out.tensor, visitor)
    _external_launch(binary, op.kernel_name(), op.grid([lo, hi]), op.block([lo, hi]), visitor)
    assert bitwise_equal(out.tensor, reference.merge(lo, hi, nh, height, width))
    assert out.canaries_intact()

    grad = inputs((batch, 2 * nh * kd, height, width), DTYPES[dtype], "cuda", 3)
    d_lo, d_hi = (poisoned((batch * nh, height * width, kd), DTYPES[dtype], "cuda")
                  for _ in range(2))
    entry = next(k["entry"] for k in bwd_build["kernels"] if k["pass"] == "backward"
                 and k["index_dtype"] == "int32" and k["vec"] == bwd_build["vector_width"])
    visitor = _CtypesVisitor()
    op.pack_backward_args(grad, [d_lo.tensor, d_hi.tensor], visitor)
    binary = (gpu_artifacts / bwd_build["binaries"][0]["path"]).read_bytes()
    _external_launch(binary, entry, op.backward_grid(grad), op.backward_block(grad), visitor)
    ref_lo, ref_hi = reference.merge_backward(grad, nh, kd)
    assert bitwise_equal(d_lo.tensor, ref_lo) and bitwise_equal(d_hi.tensor, ref_hi)
    assert d_lo.canaries_intact() and d_hi.canaries_intact()


def test_pack_args_names_real_device_pointers(gpu_artifacts):
    op = PsaMergeAttnRuntimeOp(32, 4, "float16", schedule="tiled", artifacts=gpu_artifacts)
    lo = inputs((8, 400, 32), torch.float16, "cuda")
    hi = inputs((8, 400, 32), torch.float16, "cuda", 1)
    out = torch.empty(2, 256, 20, 20, dtype=torch.float16, device="cuda")
    visitor = RecordingVisitor()
    op.pack_args([lo, hi], out, visitor)
    pointers = {name: value for kind, name, value in visitor.args if kind == "ptr"}
    assert pointers == {"hi_ptr": hi.data_ptr(), "lo_ptr": lo.data_ptr(),
                        "out_ptr": out.data_ptr()}


# ----------------------------------------------------------------------- PyTorch integration
@pytest.fixture
def torch_ops(gpu_artifacts, monkeypatch):
    monkeypatch.setenv("PSA_TVM_ARTIFACTS", str(gpu_artifacts))
    import psa_tvm.torch as psa_torch

    return psa_torch


@pytest.mark.parametrize("dtype", DTYPES)
def test_autograd_gives_exact_gradients(torch_ops, dtype):
    nh, kd, batch, height, width = 4, 32, 2, 7, 13
    lo = inputs((batch * nh, height * width, kd), DTYPES[dtype], "cuda").requires_grad_()
    hi = inputs((batch * nh, height * width, kd), DTYPES[dtype], "cuda", 1).requires_grad_()
    grad = inputs((batch, 2 * nh * kd, height, width), DTYPES[dtype], "cuda", 2)
    merged = torch_ops.merge_attn(lo, hi, nh, height, width)
    assert bitwise_equal(merged.detach(), reference.merge(lo.detach(), hi.detach(), nh, height,
                                                          width))
    merged.backward(grad)
    ref_lo, ref_hi = reference.merge_backward(grad, nh, kd)
    assert bitwise_equal(lo.grad, ref_lo) and bitwise_equal(hi.grad, ref_hi)


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_two_shapes(torch_ops, dynamic):
    torch._dynamo.reset()
    nh, kd = 4, 32

    def block(lo, hi, height, width):
        return torch_ops.merge_attn(lo * 2, hi, nh, height, width).relu()

    compiled = torch.compile(block, fullgraph=True, dynamic=dynamic)
    for batch, height, width in ((1, 20, 20), (3, 40, 40)):
        lo = inputs((batch * nh, height * width, kd), torch.float16, "cuda")
        hi = inputs((batch * nh, height * width, kd), torch.float16, "cuda", 1)
        expected = reference.merge(lo * 2, hi, nh, height, width).relu()
        assert bitwise_equal(compiled(lo, hi, height, width), expected)


def test_cuda_graph_capture_and_replay(torch_ops):
    nh, kd, batch, height, width = 4, 32, 2, 20, 20
    lo = inputs((batch * nh, height * width, kd), torch.bfloat16, "cuda")
    hi = inputs((batch * nh, height * width, kd), torch.bfloat16, "cuda", 1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up: module load happens outside the capture
        torch_ops.merge_attn(lo, hi, nh, height, width)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        merged = torch_ops.merge_attn(lo, hi, nh, height, width)
    for seed in (5, 6):
        lo.copy_(inputs(lo.shape, lo.dtype, "cuda", seed))
        merged.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert bitwise_equal(merged, reference.merge(lo, hi, nh, height, width))


def test_runs_on_the_current_non_default_stream(torch_ops):
    nh, kd, batch, height, width = 4, 32, 8, 40, 40
    lo = inputs((batch * nh, height * width, kd), torch.float32, "cuda")
    hi = inputs((batch * nh, height * width, kd), torch.float32, "cuda", 1)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(20_000_000)  # keep the stream busy: a launch elsewhere would race
        merged = torch_ops.merge_attn(lo, hi, nh, height, width)
        expected = reference.merge(lo, hi, nh, height, width)
        same = bitwise_equal(merged, expected)
    stream.synchronize()
    assert same


# ----------------------------------------------------------------------- sizes past int32
def test_tensors_past_int32_use_the_int64_kernels(gpu_artifacts):
    """lo/hi of 2**31 + elements each (merged 4.4e9): the int64 variant, still bit-exact."""
    nh, kd, batch, height, width = 4, 32, 65, 512, 512
    numel = batch * nh * height * width * kd
    assert numel > 2**31 - 1
    op = runtime_op(str(gpu_artifacts), kd, nh, "float16", "tiled")
    lo = torch.empty(batch * nh, height * width, kd, dtype=torch.float16, device="cuda")
    hi = torch.empty_like(lo)
    lo.view(-1)[:1 << 20].copy_(inputs((1 << 20,), torch.float16, "cuda"))
    lo.view(-1)[1 << 20:].fill_(1.5)
    lo.view(-1)[-(1 << 20):].copy_(inputs((1 << 20,), torch.float16, "cuda", 1))
    hi.fill_(-2.25)
    hi.view(-1)[-(1 << 20):].copy_(inputs((1 << 20,), torch.float16, "cuda", 2))
    out = torch.full((batch, 2 * nh * kd, height, width), float("nan"), dtype=torch.float16,
                     device="cuda")
    plan = op.plan_forward([lo, hi], out, (height, width))
    assert plan.kernel.index_dtype == "int64"
    op.launch_forward(lo, hi, out, torch.cuda.current_stream().cuda_stream, (height, width))
    expected = reference.merge(lo, hi, nh, height, width)
    assert bitwise_equal(out, expected)
    del expected, out
    grad = torch.empty(batch, 2 * nh * kd, height, width, dtype=torch.float16, device="cuda")
    grad.view(-1)[:].fill_(0.75)
    grad.view(-1)[-(1 << 20):].copy_(inputs((1 << 20,), torch.float16, "cuda", 3))
    lo.fill_(float("nan"))
    hi.fill_(float("nan"))
    op.launch_backward(grad, lo, hi, torch.cuda.current_stream().cuda_stream)
    ref_lo, ref_hi = reference.merge_backward(grad, nh, kd)
    assert bitwise_equal(lo, ref_lo) and bitwise_equal(hi, ref_hi)
