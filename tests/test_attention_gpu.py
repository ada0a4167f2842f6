"""PSA attention on the GPU: the layout kernels bit-exact (poisoned outputs with canaries, tails,
misaligned views, side streams), psa_attention against the plain-torch definition in every
backend (forward and gradients), no hidden copies, torch.compile and CUDA graphs.

Needs artifacts with the layout family for kd=32, nh=4 (``psa-tvm build --attention``)."""

from __future__ import annotations

import pytest
import torch

from psa_tvm import attention as A
from psa_tvm.layouts import GATHER_OUTPUT, SCATTER_OUTPUT, STREAM_OPS
from tests.helpers import bitwise_equal, inputs, poisoned
from tests.test_attention import _torch_reference, reference_attention

pytestmark = pytest.mark.gpu

KD, NH = 32, 4
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
SHAPES = [(2, 20, 20), (3, 7, 9), (1, 80, 80)]  # (B, H, W); 7x9 is an N % 8 tail


def _runtime(op, dtype):
    from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp

    return PsaStreamRuntimeOp(op, KD, NH, str(dtype).removeprefix("torch."))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("offset", [0, 1])  # 1: every input a misaligned view (scalar kernel)
def test_layout_kernels_bit_exact(dtype, shape, offset):
    b, height, width = shape
    n = height * width
    for name, op in STREAM_OPS.items():
        runtime = _runtime(name, dtype)
        for pass_ in op.passes:
            names, tensors, out = _layout_case(op, pass_, b, n, dtype, offset)
            runtime.launch(pass_, {**tensors, names[-1]: out.tensor}, b, n,
                           torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            cpu = {k: v.cpu() for k, v in tensors.items()}
            want = _torch_reference(op, pass_, cpu, b, n, NH, KD, height, width)
            assert bitwise_equal(out.tensor.cpu(), want), (name, pass_)
            assert out.canaries_intact(), (name, pass_)


def _layout_case(op, pass_, b, n, dtype, offset, device="cuda"):
    """One kernel's tensors: random inputs (``offset`` elements into their buffers, so
    ``offset=1`` makes every input a misaligned view) and a poisoned output with canaries."""
    shapes = op.kernel_shapes(pass_, b, n, NH, KD)
    names = op.tensor_names(pass_)
    tensors = {}
    for i, t in enumerate(names[:-1]):
        base = inputs((offset + _numel(shapes[t]),), dtype, device, seed=i)
        tensors[t] = base[offset:].view(shapes[t])
    return names, tensors, poisoned(shapes[names[-1]], dtype, device)


def _numel(shape):
    total = 1
    for s in shape:
        total *= s
    return total


def test_layout_kernels_on_a_busy_side_stream():
    """Launches go to torch's current stream: queued behind a spinning kernel, still right."""
    b, height, width = 4, 40, 40
    qkv = inputs((b, 4 * NH * KD, height, width), torch.float16, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        scratch = qkv * 1  # written after the spin, on the side stream
        p = A.split_heads(scratch, NH, KD)
        back = A.merge_heads(p, KD, height, width)
    torch.cuda.current_stream().wait_stream(side)
    assert bitwise_equal(back, qkv)
    assert bitwise_equal(p.cpu(), A._split_heads_cpu(qkv.cpu(), NH, KD))


def test_pack_runtime_op_launches():
    from psa_tvm.runtime.stream_op import PsaPackQkvRuntimeOp

    op = PsaPackQkvRuntimeOp(KD, NH, "float16")
    qkv = inputs((2, 4 * NH * KD, 20, 20), torch.float16, "cuda")
    packed = poisoned(op.compute_concrete_output_shape([list(qkv.shape)]), torch.float16, "cuda")
    stream = torch.cuda.current_stream().cuda_stream
    op.launch_forward(qkv, packed.tensor, stream)
    back = poisoned(tuple(qkv.shape), torch.float16, "cuda")
    op.launch_backward(packed.tensor, back.tensor, stream)
    torch.cuda.synchronize()
    assert bitwise_equal(back.tensor, qkv) and packed.canaries_intact() and back.canaries_intact()
    with pytest.raises(ValueError, match="split: expected"):
        op.launch_forward(qkv, packed.tensor[:1], stream)


# ----------------------------------------------------------------- psa_attention
def _tolerance(dtype):
    return 2e-2 if dtype == torch.bfloat16 else 5e-3


_CL = torch.channels_last


@pytest.mark.parametrize("backend", ["flash", "cudnn", "sdpa", "auto"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 20, 20), (3, 7, 9), (1, 40, 40)])
@pytest.mark.parametrize("fmt", ["contiguous", "channels_last"])
def test_psa_attention_matches_reference(backend, dtype, shape, fmt):
    b, height, width = shape
    qkv = inputs((b, 4 * NH * KD, height, width), dtype, "cuda")
    grad = inputs((b, 2 * NH * KD, height, width), dtype, "cuda", seed=1)
    if fmt == "channels_last":
        qkv, grad = qkv.contiguous(memory_format=_CL), grad.contiguous(memory_format=_CL)
    qkv.requires_grad_(True)
    out = A.psa_attention(qkv, NH, KD, height, width, backend)
    (got,) = torch.autograd.grad(out, qkv, grad)
    ref_in = qkv.detach().float().requires_grad_(True)
    ref = reference_attention(ref_in, NH, KD, height, width)
    (want,) = torch.autograd.grad(ref, ref_in, grad.float())
    tol = _tolerance(dtype)
    assert out.dtype == dtype and out.shape == ref.shape
    if fmt == "channels_last":
        assert out.is_contiguous(memory_format=_CL) and got.is_contiguous(memory_format=_CL)
    assert (out.float() - ref).norm() / ref.norm() < tol
    assert (got.float() - want).norm() / want.norm() < 2 * tol


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 20, 20), (1, 37, 29), (1, 80, 80)])
def test_flash_inference_pairs_the_halves_at_batch_one(dtype, shape, monkeypatch):
    """Batch-1 flash inference runs one flash call (q, k expanded to a batch of 2 against
    both V halves, on the extension and on the Python path) and matches the two-call forward
    and the float32 reference."""
    from psa_tvm.runtime import torch_ext

    b, height, width = shape
    qkv = inputs((b, 4 * NH * KD, height, width), dtype, "cuda")
    two_calls = A._flash_forward(qkv, NH, KD, height, width)[0]
    ref = reference_attention(qkv.float(), NH, KD, height, width)
    calls = []
    flash = A._ATEN.flash
    monkeypatch.setattr(A._ATEN, "flash", lambda *a, **k: calls.append(a[2].shape) or flash(
        *a, **k))
    with torch.inference_mode(), torch_ext.suspended():
        python = A.psa_attention(qkv, NH, KD, height, width, "flash")
    assert calls == [torch.Size((2, NH, height * width, KD))]
    with torch.inference_mode():
        public = A.psa_attention(qkv, NH, KD, height, width, "flash")  # the extension, if any
    for got in (python, public):
        assert got.shape == two_calls.shape
        torch.testing.assert_close(got, two_calls, atol=2e-3, rtol=2e-3)
        assert (got.float() - ref).norm() / ref.norm() < _tolerance(dtype)


def test_auto_picks_a_fused_backend_on_half_and_sdpa_on_float32():
    device = torch.device("cuda")
    expected = "cudnn" if torch.backends.cuda.cudnn_sdp_enabled() else "flash"
    assert A.resolve_backend("auto", device, torch.float16, KD) == expected
    assert A.resolve_backend("auto", device, torch.float32, KD) == "sdpa"


def _kernel_names(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
def test_no_copy_kernels(backend):
    """Forward and backward run only psa-tvm's kernels and the attention library's."""
    qkv = inputs((2, 4 * NH * KD, 20, 20), torch.float16, "cuda").requires_grad_(True)
    grad = inputs((2, 2 * NH * KD, 20, 20), torch.float16, "cuda", seed=1)

    def step():
        out = A.psa_attention(qkv, NH, KD, 20, 20, backend)
        return torch.autograd.grad(out, qkv, grad)

    names = _kernel_names(step)
    allowed = ("psa_", "flash", "cudnn", "Memset", "fmha", "sm90", "sm80", "cutlass")
    foreign = [n for n in names if not any(a in n for a in allowed)]
    assert not foreign, foreign
    ours = [n for n in names if n.startswith("psa_")]
    assert len(ours) == 4, ours  # pack, merge, d_out scatter, gradient gather


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
@pytest.mark.parametrize("batch", [2, 1])
def test_channels_last_runs_no_layout_kernel(backend, batch):
    """A channels_last qkv: inference runs no psa-tvm kernel at all; cuDNN's output is the
    result (no kernel besides the attention's), flash's two halves are joined by one cat
    (batch 1: one flash call). Training: the gradient's sums and joins, still no transpose."""
    qkv = inputs((batch, 4 * NH * KD, 20, 20), torch.float16, "cuda").contiguous(
        memory_format=_CL)
    grad = inputs((batch, 2 * NH * KD, 20, 20), torch.float16, "cuda", seed=1).contiguous(
        memory_format=_CL)

    def infer():
        with torch.inference_mode():
            return A.psa_attention(qkv, NH, KD, 20, 20, backend)

    names = _kernel_names(infer)
    attention = ("flash", "cudnn", "Memset", "fmha", "sm90", "sm80", "cutlass")
    rest = [n for n in names if not any(a in n for a in attention)]
    assert rest == ([] if backend == "cudnn" else [next(n for n in names if "Cat" in n)]), rest
    x = qkv.detach().clone().requires_grad_(True)

    def step():
        return torch.autograd.grad(A.psa_attention(x, NH, KD, 20, 20, backend), x, grad)

    names = _kernel_names(step)
    assert not [n for n in names if n.startswith("psa_")], names
    (got,) = step()
    assert got.is_contiguous(memory_format=_CL)


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
@pytest.mark.parametrize("batch", [1, 3])
def test_channels_last_inference_in_one_extension_call(backend, batch):
    """The PyTorch extension's one-call inference takes a channels_last qkv as it is (no pack)
    and returns what the Python path does, bit for bit, channels_last."""
    from psa_tvm.runtime import torch_ext

    qkv = inputs((batch, 4 * NH * KD, 20, 20), torch.float16, "cuda").contiguous(
        memory_format=_CL)
    with torch.inference_mode():
        native = A._extension_inference(backend, qkv, NH, KD, 20, 20)
        if native is None:
            pytest.skip("no PyTorch extension or native library here")
        with torch_ext.suspended():
            python = A.psa_attention(qkv, NH, KD, 20, 20, backend)
    names = _kernel_names(lambda: A._extension_inference(backend, qkv, NH, KD, 20, 20))
    assert not [n for n in names if n.startswith("psa_")], names
    assert native.is_contiguous(memory_format=_CL) and native.shape == python.shape
    assert bitwise_equal(native, python)


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
def test_compile_fullgraph_dynamic(backend):
    compiled = torch.compile(lambda x, h, w: A.psa_attention(x, NH, KD, h, w, backend),
                             fullgraph=True, dynamic=True)
    for b, height, width, fmt in ((2, 20, 20, None), (3, 16, 24, None), (1, 40, 40, None),
                                  (2, 20, 20, _CL), (3, 16, 24, _CL)):
        qkv = inputs((b, 4 * NH * KD, height, width), torch.float16, "cuda")
        qkv = qkv.contiguous(memory_format=fmt) if fmt else qkv
        x1 = qkv.clone().requires_grad_(True)
        x2 = qkv.clone().requires_grad_(True)
        out = compiled(x1, height, width)
        ref = A.psa_attention(x2, NH, KD, height, width, backend)
        assert bitwise_equal(out, ref)
        grad = inputs(out.shape, torch.float16, "cuda", seed=2)
        (g1,) = torch.autograd.grad(out, x1, grad)
        (g2,) = torch.autograd.grad(ref, x2, grad)
        _same_up_to_atomics(g1, g2)


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
def test_cuda_graph_training_step(backend):
    qkv = inputs((2, 4 * NH * KD, 20, 20), torch.float16, "cuda").requires_grad_(True)
    grad = inputs((2, 2 * NH * KD, 20, 20), torch.float16, "cuda", seed=1)

    def step():
        out = A.psa_attention(qkv, NH, KD, 20, 20, backend)
        return (out, *torch.autograd.grad(out, qkv, grad))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_grad = step()
    with torch.no_grad():
        qkv.copy_(inputs(qkv.shape, torch.float16, "cuda", seed=5))
    graph.replay()
    torch.cuda.synchronize()
    out, g = step()
    assert bitwise_equal(static_out, out)
    _same_up_to_atomics(static_grad, g)


def _same_up_to_atomics(got: torch.Tensor, want: torch.Tensor) -> None:
    """Flash's and cuDNN's backward accumulate dq with atomics: two runs of the same step
    differ in the last bits (seen on the H200, eager against eager too)."""
    err = (got.float() - want.float()).norm() / want.float().norm()
    assert err < 1e-3, f"relative difference {err:.3g}"


def test_merge_side_names():
    assert GATHER_OUTPUT == "merge" and SCATTER_OUTPUT == "split"


# ----------------------------------------------------------------- the native library
def _native():
    from psa_tvm import ops

    native = ops._load_native()
    if not native or native.stream_run is None:
        pytest.skip("the artifact directory has no native library with the layout family")
    return native


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [*SHAPES, (2, 37, 29)])
@pytest.mark.parametrize("offset", [0, 1])
def test_native_layout_kernels_bit_exact(dtype, shape, offset):
    """Every op and pass through the native library's stream_run: canaries, tails, misaligned
    views, on a side stream."""
    native = _native()
    b, height, width = shape
    n = height * width
    side = torch.cuda.Stream()
    for name, op in STREAM_OPS.items():
        for pass_ in op.passes:
            _, tensors, out = _layout_case(op, pass_, b, n, dtype, offset)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(2_000_000)  # a late launch on the wrong stream would read junk
                native.stream_run(native.stream_ops[name], ("forward", "backward").index(pass_),
                                  b, n, NH, KD, *tensors.values(), out.tensor)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            cpu = {k: v.cpu() for k, v in tensors.items()}
            want = _torch_reference(op, pass_, cpu, b, n, NH, KD, height, width)
            assert bitwise_equal(out.tensor.cpu(), want), (name, pass_)
            assert out.canaries_intact(), (name, pass_)


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
def test_psa_attention_runs_on_the_native_library(backend, monkeypatch):
    """With the Python launcher made unusable, psa_attention (forward and backward) still runs
    and matches the reference: every layout kernel went through the library."""
    _native()

    def no_python_launcher(*key):
        raise AssertionError(f"the Python launcher ran for {key}")

    monkeypatch.setattr(A, "_runtime", no_python_launcher)
    dtype = torch.float16
    qkv = inputs((2, 4 * NH * KD, 20, 20), torch.float32, "cuda").requires_grad_(True)
    grad = inputs((2, 2 * NH * KD, 20, 20), torch.float32, "cuda", seed=1)
    ref = reference_attention(qkv, NH, KD, 20, 20)
    (ref_grad,) = torch.autograd.grad(ref, qkv, grad)
    half = qkv.detach().to(dtype).requires_grad_(True)
    out = A.psa_attention(half, NH, KD, 20, 20, backend)
    (got_grad,) = torch.autograd.grad(out, half, grad.to(dtype))
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got_grad.float(), ref_grad, atol=5e-2, rtol=5e-2)
    with torch.inference_mode():
        again = A.psa_attention(half.detach(), NH, KD, 20, 20, backend)
    assert bitwise_equal(again, out.detach())
