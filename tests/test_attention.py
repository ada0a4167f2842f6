"""PSA attention on the CPU: the layout family's TensorIR (LLVM) against torch, its manifest and
RuntimeOps, the torch ops (opcheck), ``psa_attention`` against the plain-torch definition in
every backend's plumbing (flash and cuDNN through a CPU emulation), and torch.compile."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

from psa_tvm import attention as A
from psa_tvm.config import OpConfig
from psa_tvm.layouts import STREAM_OPS, StreamOp, stream_op
from tests import attention_emulation as emu
from tests.helpers import bitwise_equal, inputs

CONFIG = OpConfig(32, 4, "float16")


def reference_attention(qkv, num_heads, key_dim, height, width):
    """ultralytics' Attention core (attn_ratio=0.5), written from the issue's semantics."""
    b = qkv.shape[0]
    q, k, v = qkv.view(b, num_heads, 4 * key_dim, height * width).split(
        [key_dim, key_dim, 2 * key_dim], dim=2)
    attn = ((q * key_dim ** -0.5).transpose(-2, -1) @ k).softmax(dim=-1)
    return (v @ attn.transpose(-2, -1)).view(b, num_heads * 2 * key_dim, height, width)


# ----------------------------------------------------------------- the TensorIR, on LLVM
def _torch_reference(op: StreamOp, pass_: str, tensors, b, n, nh, kd, height, width):
    """The family's definition in torch, on the kernel's views (the CPU ops are this too)."""
    if pass_ == "backward":  # g [B, nh, S, kd, N]
        rows = (0, 4, 1) if op.layout == "bnhd" else (0, 1, 4)
        order = (2, *rows, 3) if op.separate else (*rows, 2, 3)
        return tensors["g"].permute(*order).contiguous()
    out = []
    for sources in op.streams:
        total = None
        for name, chunk in sources:
            x = tensors[name][..., chunk * kd:(chunk + 1) * kd]
            x = x.permute(0, 2, 3, 1) if op.layout == "bnhd" else x.permute(0, 1, 3, 2)
            total = x if total is None else total + x
        out.append(total)
    return torch.stack(out, 2).contiguous()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_family_tensorir_bit_exact(dtype, index_dtype, layout):
    tvm = pytest.importorskip("tvm")
    from psa_tvm.compiler.compute import stream_pass

    b, height, width, nh, kd = 2, 3, 5, 3, 8
    n = height * width
    config = OpConfig(kd, nh, dtype)
    for base in STREAM_OPS.values():
        op = dataclasses.replace(base, layout=layout)
        for pass_ in op.passes:
            func = stream_pass(config, op, pass_, index_dtype=index_dtype, name="f")
            lib = tvm.compile(tvm.IRModule({"f": func}), target="llvm")
            shapes = op.kernel_shapes(pass_, b, n, nh, kd)
            names = op.tensor_names(pass_)
            tensors = {name: inputs(shapes[name], A_DTYPES[dtype], "cpu", seed=i)
                       for i, name in enumerate(names[:-1])}
            out = torch.full(shapes[names[-1]], float("nan"), dtype=A_DTYPES[dtype])
            lib["f"](*tensors.values(), out, n)
            expected = _torch_reference(op, pass_, tensors, b, n, nh, kd, height, width)
            assert bitwise_equal(out, expected), (op.name, pass_)


A_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def test_cpu_ops_are_the_family_definition():
    """The torch CPU implementations compute what the TensorIR computes (bitwise)."""
    b, nh, kd, height, width = 2, 3, 8, 4, 5
    n = height * width
    for dtype in (torch.float16, torch.bfloat16):
        qkv = inputs((b, 4 * nh * kd, height, width), dtype, "cpu")
        p = A.split_heads(qkv, nh, kd)
        expected = _torch_reference(stream_op("qkv"), "backward",
                                    {"g": qkv.view(b, nh, 4, kd, n)}, b, n, nh, kd, height,
                                    width)
        assert bitwise_equal(p, expected.view(b, n, nh, 4 * kd))
        assert bitwise_equal(A.merge_heads(p, kd, height, width), qkv)
        grads = [inputs((b, n, nh, kd), dtype, "cpu", seed=s) for s in range(6)]
        got = torch.ops.psa_tvm.qkv_grad(grads, "flash", height, width)
        names = ("dq1", "dq2", "dk1", "dk2", "dv_lo", "dv_hi")
        expected = _torch_reference(stream_op("qkv_grad_flash"), "forward",
                                    dict(zip(names, grads, strict=True)), b, n, nh, kd, height,
                                    width)
        assert bitwise_equal(got, expected.view(got.shape))


# ----------------------------------------------------------------- build, manifest, RuntimeOps
def test_manifest_records_are_generic(attention_artifacts):
    manifest = json.loads((attention_artifacts / "manifest.json").read_text())
    ops = {b["op"] for b in manifest["builds"]}
    assert ops == set(STREAM_OPS)
    for build in manifest["builds"]:
        op = stream_op(build["op"])
        passes = {k["pass"] for k in build["kernels"]}
        assert passes == set(op.passes)
        for kernel in build["kernels"]:
            assert {"pass", "vec", "index_dtype", "entry", "params", "grid", "block",
                    "dynamic_smem_bytes", "symbols", "tensors"} <= set(kernel)
            tensors = {p["tensor"] for p in kernel["params"] if p["type"] == "ptr"}
            assert tensors == set(op.tensor_names(kernel["pass"]))
            assert {p["symbol"] for p in kernel["params"] if p["type"] != "ptr"} == {"B", "NV"}
            assert kernel["entry"].startswith(f"psa_{build['op']}_")


def test_merge_lookup_ignores_family_builds(attention_artifacts):
    from psa_tvm.errors import ArtifactNotFoundError
    from psa_tvm.runtime.manifest import Manifest

    manifest = Manifest.load(attention_artifacts)
    with pytest.raises(ArtifactNotFoundError):
        manifest.find(CONFIG, "tiled")  # only family builds there: no merge build
    assert manifest.find(CONFIG, "tiled", op="qkv").op == "qkv"


def test_stream_runtime_op_plans(attention_artifacts):
    from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp, StreamDims
    from psa_tvm.runtime.tensors import TensorInfo

    op = PsaStreamRuntimeOp("qkv_grad_flash", 32, 4, "float16", artifacts=attention_artifacts)

    def infos(b, n, ptr=1 << 20):
        shapes = op.kernel_shapes("forward", StreamDims(b, n))
        return {name: TensorInfo(ptr + i * (1 << 40), shape, None, "float16", "cuda", 0)
                for i, (name, shape) in enumerate(shapes.items())}

    plan = op.plan("forward", infos(2, 400), StreamDims(2, 400))
    assert plan.kernel.vec == 8 and plan.kernel.index_dtype == "int32"
    # one CTA row per (b, stream) and two heads: qkv_grad_flash's own params (slices_per_cta=2)
    assert plan.grid[1] == 2 * 4 * 4 // 2
    tail = op.plan("forward", infos(2, 401), StreamDims(2, 401))
    assert tail.kernel.vec == 1
    misaligned = op.plan("forward", infos(2, 400, ptr=(1 << 20) + 2), StreamDims(2, 400))
    assert misaligned.kernel.vec == 1
    big = op.plan("forward", infos(1024, 6400), StreamDims(1024, 6400))
    assert big.kernel.index_dtype == "int64"
    with pytest.raises(ValueError, match=r"B=8192, N=64 needs grid\[1\]=65536"):
        op.plan("forward", infos(8192, 64), StreamDims(8192, 64))
    bad = infos(2, 400)
    bad["dq2"] = TensorInfo(bad["dq2"].ptr, (2, 400, 4, 16), None, "float16", "cuda", 0)
    with pytest.raises(ValueError, match="dq2: expected shape"):
        op.plan("forward", bad, StreamDims(2, 400))
    bad = infos(2, 400)
    bad["dk1"] = TensorInfo(bad["dk1"].ptr, bad["dk1"].shape, None, "float32", "cuda", 0)
    with pytest.raises(TypeError, match="dk1: expected dtype float16"):
        op.plan("forward", bad, StreamDims(2, 400))
    bad = infos(2, 400)
    bad["merge"] = TensorInfo(bad["dq1"].ptr, bad["merge"].shape, None, "float16", "cuda", 0)
    with pytest.raises(ValueError, match="merge: expected memory disjoint from dq1"):
        op.plan("forward", bad, StreamDims(2, 400))
    with pytest.raises(ValueError, match="pass: op 'qkv_grad_flash' has"):
        op.plan("backward", infos(2, 400), StreamDims(2, 400))


def test_pack_runtime_op_seed_surface(attention_artifacts):
    from psa_tvm import RuntimeOp
    from psa_tvm.runtime.protocol import RecordingVisitor
    from psa_tvm.runtime.stream_op import PsaPackQkvRuntimeOp

    op = PsaPackQkvRuntimeOp(32, 4, "float16", artifacts=attention_artifacts)
    assert isinstance(op, RuntimeOp)
    qkv = (1 << 20, [2, 4 * 4 * 32, 20, 20])
    packed = ((1 << 20) + (1 << 30), [2, 400, 4, 128])
    assert op.n_activation_inputs() == 1 and op.param_shapes() == []
    assert op.compute_concrete_output_shape([qkv[1]]) == [2, 400, 4, 128]
    assert op.grid([qkv]) == op.grid([qkv[1]])
    assert op.block([qkv])[0] > 0
    visitor = RecordingVisitor()
    op.pack_args([qkv], packed, visitor)
    kinds = [(kind, name) for kind, name, _ in visitor.args]
    assert kinds == [("ptr", "g_ptr"), ("ptr", "split_ptr"), ("int32", "B"), ("int32", "NV")]
    assert [v for _, _, v in visitor.args] == [qkv[0], packed[0], 2, 400 // 8]
    assert op.kernel_name([qkv]).startswith("psa_qkv_bwd_tiled_v8")
    visitor = RecordingVisitor()
    op.pack_backward_args(packed, [qkv], visitor)
    assert [name for _, name, _ in visitor.args] == ["merge_ptr", "p_ptr", "B", "NV"]
    assert op.backward_grid(packed) == op.backward_grid(packed[1])
    with pytest.raises(ValueError, match=r"qkv: expected \[B, 512, H, W\]"):
        op.grid([[2, 500, 20, 20]])
    with pytest.raises(ValueError, match="launch"):
        op.grid_for_launch(1, [qkv])


# ----------------------------------------------------------------- torch ops
@pytest.mark.parametrize("streams", [2, 4])
def test_split_merge_heads_opcheck(streams):
    x = inputs((2, streams * 3 * 8, 4, 5), torch.float32, "cpu").requires_grad_(True)
    torch.library.opcheck(torch.ops.psa_tvm.split_heads, (x, 3, 8))
    p = A.split_heads(x, 3, 8).detach().requires_grad_(True)
    torch.library.opcheck(torch.ops.psa_tvm.merge_heads, (p, 8, 4, 5))
    assert torch.autograd.gradcheck(lambda t: A.split_heads(t, 3, 8), (x.double(),))


def test_merge_heads2_and_qkv_grad_opcheck():
    lo = inputs((2, 20, 3, 8), torch.float32, "cpu").requires_grad_(True)
    hi = inputs((2, 20, 3, 8), torch.float32, "cpu", seed=1).requires_grad_(True)
    torch.library.opcheck(torch.ops.psa_tvm.merge_heads2, (lo, hi, 4, 5))
    x = inputs((2, 2 * 3 * 8, 4, 5), torch.float32, "cpu").requires_grad_(True)
    torch.library.opcheck(torch.ops.psa_tvm.split_heads2, (x, 3, 8))
    d = torch.ops.psa_tvm.split_heads2(x, 3, 8)
    assert bitwise_equal(A.merge_heads2(d[0], d[1], 4, 5), x)
    assert torch.autograd.gradcheck(lambda t, u: A.merge_heads2(t, u, 4, 5),
                                    (lo.double(), hi.double()))
    grads = [inputs((2, 20, 3, 8), torch.float32, "cpu", seed=s) for s in range(6)]
    torch.library.opcheck(torch.ops.psa_tvm.qkv_grad, (grads, "flash", 4, 5))
    torch.library.opcheck(torch.ops.psa_tvm.qkv_grad,
                          ([grads[0], grads[1], torch.cat(grads[2:4], 3)], "cudnn", 4, 5))


def test_op_errors_name_the_argument():
    x = inputs((2, 100, 4, 5), torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"x: expected \[B, S\*3\*8, H, W\]"):
        A.split_heads(x, 3, 8)
    with pytest.raises(ValueError, match="hi: expected the shape"):
        A.merge_heads2(torch.zeros(2, 20, 3, 8), torch.zeros(2, 20, 3, 4), 4, 5)
    with pytest.raises(ValueError, match="backend"):
        torch.ops.psa_tvm.qkv_grad([torch.zeros(2, 20, 3, 8)], "nope", 4, 5)


# ----------------------------------------------------------------- psa_attention
@pytest.mark.parametrize("shape", [(2, 2, 16, 5, 7), (1, 1, 8, 1, 1), (3, 4, 32, 8, 8)])
def test_psa_attention_matches_reference(shape):
    b, nh, kd, height, width = shape
    qkv = inputs((b, 4 * nh * kd, height, width), torch.float64, "cpu").requires_grad_(True)
    out = A.psa_attention(qkv, nh, kd, height, width)
    ref = reference_attention(qkv, nh, kd, height, width)
    torch.testing.assert_close(out, ref)
    grad = inputs(out.shape, torch.float64, "cpu", seed=1)
    (got,) = torch.autograd.grad(out, qkv, grad)
    (want,) = torch.autograd.grad(ref, qkv, grad)
    torch.testing.assert_close(got, want)


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last)


def _is_channels_last(x: torch.Tensor) -> bool:
    return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("grad_format", ["channels_last", "contiguous"])
def test_psa_attention_channels_last(grad_format):
    """A channels_last qkv gives a channels_last result and gradient, equal to the NCHW path's
    (the sdpa backend on the CPU), whatever the gradient's own format."""
    b, nh, kd, height, width = 2, 3, 8, 5, 7
    base = inputs((b, 4 * nh * kd, height, width), torch.float64, "cpu")
    qkv = _channels_last(base).requires_grad_(True)
    out = A.psa_attention(qkv, nh, kd, height, width)
    assert _is_channels_last(out)
    ref_in = base.clone().requires_grad_(True)
    ref = reference_attention(ref_in, nh, kd, height, width)
    torch.testing.assert_close(out, ref)
    grad = inputs(out.shape, torch.float64, "cpu", seed=1)
    grad = _channels_last(grad) if grad_format == "channels_last" else grad
    (got,) = torch.autograd.grad(out, qkv, grad)
    (want,) = torch.autograd.grad(ref, ref_in, grad)
    torch.testing.assert_close(got, want)


@pytest.fixture
def emulated_sdpa(monkeypatch):
    monkeypatch.setattr(A, "_ATEN", SimpleNamespace(
        flash=emu.flash, flash_backward=emu.flash_backward, cudnn=emu.cudnn,
        cudnn_backward=emu.cudnn_backward))


@pytest.mark.parametrize("function", ["_FlashAttention", "_CudnnAttention"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("formats", [("contiguous", "contiguous"),
                                     ("channels_last", "channels_last"),
                                     ("channels_last", "contiguous"),
                                     ("contiguous", "channels_last")])
def test_fused_backends_plumbing(emulated_sdpa, function, dtype, formats):
    """Pack, views, saved tensors, the backward calls and the gradient gather, on the CPU; for
    qkv and the incoming gradient in either memory format (the result and ``d_qkv`` follow
    ``qkv``'s)."""
    b, nh, kd, height, width = 2, 3, 8, 4, 5
    base = inputs((b, 4 * nh * kd, height, width), dtype, "cpu")
    qkv = (_channels_last(base) if formats[0] == "channels_last" else base).requires_grad_(True)
    out = getattr(A, function).apply(qkv, nh, kd, height, width)
    ref_in = base.clone().requires_grad_(True)
    ref = reference_attention(ref_in, nh, kd, height, width)
    torch.testing.assert_close(out, ref)
    grad = inputs(out.shape, dtype, "cpu", seed=1)
    grad = _channels_last(grad) if formats[1] == "channels_last" else grad
    (got,) = torch.autograd.grad(out, qkv, grad)
    (want,) = torch.autograd.grad(ref, ref_in, grad)
    torch.testing.assert_close(got, want)
    cl = formats[0] == "channels_last"
    assert _is_channels_last(out) == cl and _is_channels_last(got) == cl


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "no_requires_grad"])
@pytest.mark.parametrize("fmt", ["contiguous", "channels_last"])
@pytest.mark.parametrize("batch", [2, 1])
def test_inference_path_equals_the_autograd_path(emulated_sdpa, monkeypatch, backend, mode,
                                                 fmt, batch):
    """With nothing to differentiate psa_attention runs the forward alone (no Function, views by
    as_strided; at batch 1 flash pairs the halves in one call): the same output, bit for bit,
    as the differentiable path, in the same memory format."""
    monkeypatch.setattr(A, "resolve_backend", lambda *args: backend)
    b, nh, kd, height, width = batch, 3, 8, 4, 5
    qkv = inputs((b, 4 * nh * kd, height, width), torch.float32, "cpu")
    if fmt == "channels_last":
        qkv = _channels_last(qkv)
    want = A.psa_attention(qkv.clone().requires_grad_(True), nh, kd, height, width).detach()
    applied = []
    function = A._FlashAttention if backend == "flash" else A._CudnnAttention
    monkeypatch.setattr(function, "apply", lambda *args: applied.append(args))
    if mode == "no_grad":
        with torch.no_grad():
            got = A.psa_attention(qkv.requires_grad_(True), nh, kd, height, width)
    elif mode == "inference_mode":
        with torch.inference_mode():
            got = A.psa_attention(qkv, nh, kd, height, width)
    else:
        got = A.psa_attention(qkv, nh, kd, height, width)
    assert not applied and not got.requires_grad
    assert bitwise_equal(got, want)
    assert got.stride() == want.stride() and _is_channels_last(got) == (fmt == "channels_last")


def test_backend_choice_and_errors():
    cpu = torch.device("cpu")
    assert A.resolve_backend("auto", cpu, torch.float16, 32) == "sdpa"
    with pytest.raises(ValueError, match="backend: 'flash' cannot run"):
        A.resolve_backend("flash", cpu, torch.float16, 32)
    with pytest.raises(ValueError, match="backend: expected one of"):
        A.resolve_backend("fast", cpu, torch.float16, 32)
    qkv = torch.zeros(1, 4 * 2 * 8, 3, 3)
    with pytest.raises(ValueError, match="qkv: expected 128 channels"):
        A.psa_attention(qkv, 2, 16, 3, 3)
    with pytest.raises(ValueError, match="qkv: expected spatial size H=3, W=4"):
        A.psa_attention(qkv, 2, 8, 3, 4)
    with pytest.raises(ValueError, match="num_heads: expected a positive int"):
        A.psa_attention(qkv, 0, 8, 3, 3)


def test_psa_attention_compiles_fullgraph_dynamic():
    import psa_tvm.torch as pt

    nh, kd = 2, 8
    compiled = torch.compile(lambda x, h, w: pt.psa_attention(x, nh, kd, h, w), fullgraph=True,
                             dynamic=True)
    for b, height, width, fmt in ((2, 5, 7, "contiguous"), (3, 6, 6, "contiguous"),
                                  (1, 4, 9, "contiguous"), (2, 5, 7, "channels_last"),
                                  (3, 4, 6, "channels_last")):
        x = inputs((b, 4 * nh * kd, height, width), torch.float32, "cpu")
        x = (_channels_last(x) if fmt == "channels_last" else x).requires_grad_(True)
        out = compiled(x, height, width)
        assert _is_channels_last(out) == (fmt == "channels_last")
        ref = reference_attention(x, nh, kd, height, width)
        torch.testing.assert_close(out, ref)
        (got,) = torch.autograd.grad(out.sum(), x)
        (want,) = torch.autograd.grad(ref.sum(), x)
        torch.testing.assert_close(got, want)
