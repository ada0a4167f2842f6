"""The PyTorch extension (runtime/torch_ext.py, psa_torch_ext.cc): built against the installed
torch, bound to the native library; merge / merge_backward / merge_attn with their allocation
and autograd node in C++. CPU tests here (the extension's CPU path is the library's CPU
kernels); the GPU tests run the same on CUDA tensors (exactness with canaries, the current
side stream, CUDA graphs, autograd)."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

import psa_tvm
import psa_tvm.torch as pt
from psa_tvm import reference
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime import torch_ext
from tests.helpers import bitwise_equal, inputs, poisoned

KD, NH = 32, 4
C = 2 * NH * KD

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None or shutil.which("ninja") is None,
    reason="the extension needs a C++ compiler and ninja")


@pytest.fixture(scope="module")
def ext(small_artifacts, tmp_path_factory):
    """The extension, built once (into a temporary cache) and bound to the small directory's
    library; dropped afterwards so that other modules run the paths without it."""
    if native_rt.library_path(small_artifacts) is None:
        pytest.skip("the native library was not built")
    patch = pytest.MonkeyPatch()
    patch.setenv("PSA_TVM_ARTIFACTS", str(small_artifacts))
    patch.setenv("PSA_TVM_TORCH_EXT", "1")
    patch.setenv("PSA_TVM_CACHE", str(tmp_path_factory.mktemp("cache")))
    native_rt.forget()
    library = native_rt.load(small_artifacts)
    module = torch_ext.module_for(library.path, may_build=True)
    yield module
    torch_ext.reset()
    patch.undo()
    native_rt.forget()


def _merged_ref(lo, hi, height, width):
    return reference.merge(lo, hi, NH, height, width)


def _case(shape, dtype, device):
    """``lo``, ``hi`` and a gradient of the merged output for ``shape = (B, H, W)``."""
    batch, height, width = shape
    half = (batch * NH, height * width, KD)
    return (inputs(half, dtype, device, 1), inputs(half, dtype, device, 2),
            inputs((batch, C, height, width), dtype, device, 3))


def _backward_ref(grad):
    batch, n = grad.shape[0], grad.shape[2] * grad.shape[3]
    g = grad.reshape(batch, NH, 2, KD, n).permute(0, 1, 2, 4, 3)
    return (g[:, :, 0].reshape(batch * NH, n, KD).contiguous(),
            g[:, :, 1].reshape(batch * NH, n, KD).contiguous())


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(1, 20, 20), (2, 7, 13), (0, 5, 5)])
def test_exact_forward_backward_and_autograd(ext, dtype, shape):
    batch, height, width = shape
    n = height * width
    lo, hi, grad = _case(shape, dtype, "cpu")
    want = _merged_ref(lo, hi, height, width)
    assert bitwise_equal(ext.merge(lo, hi, NH, height, width, None), want)
    out = poisoned((batch, C, height, width), dtype, "cpu")
    assert ext.merge(lo, hi, NH, height, width, out.tensor) is not None
    assert bitwise_equal(out.tensor, want) and out.canaries_intact()
    ref_lo, ref_hi = _backward_ref(grad)
    d_lo, d_hi = ext.merge_backward(grad, NH, KD, None, None)
    assert bitwise_equal(d_lo, ref_lo) and bitwise_equal(d_hi, ref_hi)
    given = poisoned((batch * NH, n, KD), dtype, "cpu")
    d_lo, d_hi = ext.merge_backward(grad, NH, KD, given.tensor, None)
    assert d_lo is given.tensor or d_lo.data_ptr() == given.tensor.data_ptr()
    assert bitwise_equal(given.tensor, ref_lo) and given.canaries_intact()
    assert bitwise_equal(d_hi, ref_hi)

    x, y = lo.clone().requires_grad_(True), hi.clone().requires_grad_(True)
    merged = ext.merge_attn(x, y, NH, height, width)
    assert bitwise_equal(merged.detach(), want)
    assert type(merged.grad_fn).__name__ == "CppFunction"  # the C++ autograd node
    got_lo, got_hi = torch.autograd.grad(merged, (x, y), grad)
    assert bitwise_equal(got_lo, ref_lo) and bitwise_equal(got_hi, ref_hi)
    with torch.no_grad():
        assert ext.merge_attn(x, y, NH, height, width).grad_fn is None


def _bad_forward_cases():
    lo = inputs((NH, 16, KD), torch.float32, "cpu")
    return [
        (lo.double(), lo.double(), NH, 4, 4),       # dtype
        (lo, lo[:, :15], NH, 4, 4),                 # hi shape
        (lo, lo, 3, 4, 4),                          # B*nh not divisible
        (lo, lo, NH, 4, 5),                         # N != H*W
        (lo[:, :, :16], lo[:, :, :16], NH, 4, 4),   # not contiguous / no build
        (lo[0], lo[0], NH, 4, 4),                   # rank
        (lo, lo, 0, 4, 4),                          # num_heads
        (lo, lo, NH, -1, 4),                        # H
        (lo, lo.half(), NH, 4, 4),                  # dtype mismatch
    ]


@pytest.mark.parametrize("case", range(len(_bad_forward_cases())))
def test_errors_are_the_librarys(ext, small_artifacts, case):
    """Every refusal: the library's exception type and message, nothing written."""
    lib = native_rt.load(small_artifacts)
    lo, hi, nh, height, width = _bad_forward_cases()[case]
    with pytest.raises(Exception) as want:
        lib.merge(lo, hi, nh, height, width, None)
    for call in (lambda: ext.merge(lo, hi, nh, height, width, None),
                 lambda: ext.merge_attn(lo.requires_grad_(lo.is_floating_point()), hi, nh,
                                        height, width)):
        with pytest.raises(Exception) as got:
            call()
        if isinstance(want.value, ArtifactNotFoundError):
            assert isinstance(got.value, RuntimeError)
            assert str(got.value).startswith("PsaArtifactNotFound")
        else:
            assert type(got.value) is type(want.value)
            assert str(got.value) == str(want.value)
        lo.requires_grad_(False)
    out = poisoned((2, C, 4, 4), torch.float32, "cpu")
    with pytest.raises((ValueError, TypeError)):
        ext.merge(lo, hi[:, :3], NH, 4, 4, out.tensor)
    assert out.canaries_intact() and torch.isnan(out.tensor).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_parallel_regions_run_on_torchs_pool(ext, threads):
    """Bound to a library with CPU kernels, the extension runs their parallel regions on torch's
    intra-op pool (at::parallel_for): exact with one thread and with several, for calls large
    enough to be parallel (> 64 KB moved)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        lo, hi, grad = _case((4, 40, 40), torch.float32, "cpu")
        out = poisoned((4, C, 40, 40), torch.float32, "cpu")
        ext.merge(lo, hi, NH, 40, 40, out.tensor)
        assert bitwise_equal(out.tensor, _merged_ref(lo, hi, 40, 40)) and out.canaries_intact()
        d_lo, d_hi = ext.merge_backward(grad, NH, KD, None, None)
        want_lo, want_hi = _backward_ref(grad)
        assert bitwise_equal(d_lo, want_lo) and bitwise_equal(d_hi, want_hi)
    finally:
        torch.set_num_threads(previous)


def test_its_launcher_wins_over_torchs_openmp_one(ext, small_artifacts):
    """Loading the library installed the GNU OpenMP launcher (runtime/cpu_pool.py, torch is
    here); binding the extension replaced it with at::parallel_for, and loading again does not
    put it back."""
    from psa_tvm.runtime import cpu_pool

    path = native_rt.load(small_artifacts).path
    assert cpu_pool.launcher_kind(path) == "external"
    assert cpu_pool.share_torch_threads(path) == "external"


def test_public_functions_use_it_and_fall_back(ext, monkeypatch):
    """psa_tvm.merge / merge_backward / psa_tvm.torch.merge_attn call the extension; a
    configuration the library lacks falls back to the Python path (which says what to build)."""
    calls = []

    class Recorder:
        def __getattr__(self, name):
            def record(*args):
                calls.append(name)
                return getattr(ext, name)(*args)
            return record

    monkeypatch.setattr(torch_ext, "_MODULE", Recorder())
    monkeypatch.setattr(torch_ext, "LANE", None)
    lo, hi = inputs((NH, 16, KD), torch.float32, "cpu", 1), inputs((NH, 16, KD),
                                                                    torch.float32, "cpu", 2)
    want = _merged_ref(lo, hi, 4, 4)
    # the first call binds and opens the eager lane; the next ones take it
    assert bitwise_equal(psa_tvm.merge(lo, hi, NH, 4, 4), want)
    assert bitwise_equal(pt.merge_attn(lo, hi, NH, 4, 4), want)
    d_lo, _ = psa_tvm.merge_backward(want, NH, KD)
    assert bitwise_equal(d_lo, lo)
    lanes = ["merge", "merge_attn_eager", "merge_backward_eager"]
    assert calls == lanes
    out = poisoned(want.shape, torch.float32, "cpu")
    assert psa_tvm.merge(lo, hi, NH, 4, 4, out=out.tensor) is out.tensor
    assert bitwise_equal(out.tensor, want) and out.canaries_intact()
    assert calls == [*lanes, "merge_eager"]
    numpy = pytest.importorskip("numpy")
    got = psa_tvm.merge(lo.numpy(), hi.numpy(), NH, 4, 4)  # not torch: the library directly
    assert isinstance(got, numpy.ndarray) and calls == [*lanes, "merge_eager", "merge_eager"]
    small = inputs((3, 16, 8), torch.float32, "cpu")  # kd=8, nh=3: not in the library
    with pytest.raises(ArtifactNotFoundError):
        pt.merge_attn(small, small, 3, 4, 4)


def _open_lane(ext) -> None:
    lo = inputs((NH, 16, KD), torch.float32, "cpu", 1)
    torch_ext.forget()
    pt.merge_attn(lo, lo, NH, 4, 4)  # binds and opens the lane
    assert torch_ext.LANE is not None and torch_ext.LANE[1] is ext


def test_eager_lanes_answer_none_for_what_is_not_a_plain_call(ext):
    """The lanes (merge_attn_eager, merge_eager, merge_backward_eager) take plain eager calls
    only: a tensor subclass, a non-int or bool count, a dispatch or function mode each give
    None, so the Python function takes its ordinary path (which decides and explains)."""
    _open_lane(ext)
    lo, hi = inputs((NH, 16, KD), torch.float32, "cpu", 1), inputs((NH, 16, KD),
                                                                    torch.float32, "cpu", 2)
    want = _merged_ref(lo, hi, 4, 4)
    assert bitwise_equal(ext.merge_attn_eager(lo, hi, NH, 4, 4), want)
    assert bitwise_equal(ext.merge_eager(lo, hi, NH, 4, 4, None), want)
    out = poisoned(want.shape, torch.float32, "cpu")
    assert ext.merge_eager(lo, hi, NH, 4, 4, out.tensor) is out.tensor
    assert bitwise_equal(out.tensor, want) and out.canaries_intact()
    d_lo, d_hi = ext.merge_backward_eager(want, NH, KD, None, None)
    assert bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)
    given = poisoned(lo.shape, torch.float32, "cpu")
    d_lo, d_hi = ext.merge_backward_eager(want, NH, KD, given.tensor, None)
    assert d_lo is given.tensor and given.canaries_intact()
    assert bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)

    class Sub(torch.Tensor):
        pass

    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    for args in ((lo.as_subclass(Sub), hi, NH, 4, 4), (lo, hi.as_subclass(Sub), NH, 4, 4),
                 (lo, hi, True, 4, 4), (lo, hi, NH, 4.0, 4), (lo, hi, NH, 4, 2**70),
                 (lo.numpy(), hi, NH, 4, 4), (lo, None, NH, 4, 4)):
        assert ext.merge_attn_eager(*args) is None
        assert ext.merge_eager(*args, None) is None
    assert ext.merge_eager(lo, hi, NH, 4, 4, out.tensor.as_subclass(Sub)) is None
    assert ext.merge_eager(lo, hi, NH, 4, 4, out.tensor.numpy()) is None
    assert ext.merge_backward_eager(want.as_subclass(Sub), NH, KD, None, None) is None
    assert ext.merge_backward_eager(want, NH, float(KD), None, None) is None
    assert ext.merge_backward_eager(want, NH, KD, None, lo.numpy()) is None
    for mode in (Seen(), TorchFunctionMode()):
        with mode:
            assert ext.merge_attn_eager(lo, hi, NH, 4, 4) is None
            assert ext.merge_backward_eager(want, NH, KD, None, None) is None
    with torch.no_grad():  # inside no_grad the lane runs, and records nothing
        got = ext.merge_attn_eager(lo.requires_grad_(), hi, NH, 4, 4)
    assert bitwise_equal(got, want) and got.grad_fn is None
    recorded = ext.merge_attn_eager(lo, hi, NH, 4, 4)
    assert recorded.grad_fn is not None  # autograd records: the C++ node
    lo.requires_grad_(False)
    # a bad call through the lane: the library's message, as every path gives it
    with pytest.raises(ValueError) as lane_error:
        pt.merge_attn(lo, hi[:, :8], NH, 4, 4)
    with torch_ext.suspended(), pytest.raises(ValueError) as python_error:
        pt.merge_attn(lo, hi[:, :8], NH, 4, 4)
    assert str(lane_error.value) == str(python_error.value)


def test_eager_lane_closes_with_its_binding(ext):
    """forget / suspended / another native library close the lane; torch.compile never
    takes it (the op runs traced, with the same result)."""
    from psa_tvm import ops

    _open_lane(ext)
    torch_ext.forget()
    assert torch_ext.LANE is None
    _open_lane(ext)
    with torch_ext.suspended():
        assert torch_ext.LANE is None
        lo = inputs((NH, 16, KD), torch.float32, "cpu", 1)
        pt.merge_attn(lo, lo, NH, 4, 4)
        assert torch_ext.LANE is None  # no call opens it while suspended
    _open_lane(ext)
    lane, library = torch_ext.LANE, ops._NATIVE
    lo = inputs((NH, 16, KD), torch.float32, "cpu", 1)
    try:
        ops._NATIVE = False  # no library in use (as after PSA_TVM_NATIVE=0): the lane is shut
        assert bitwise_equal(pt.merge_attn(lo, lo, NH, 4, 4), _merged_ref(lo, lo, 4, 4))
        assert bitwise_equal(psa_tvm.merge(lo, lo, NH, 4, 4), _merged_ref(lo, lo, 4, 4))
        assert torch_ext.LANE is lane
    finally:
        ops._NATIVE = library
    ops._forget_native()  # looked up again by the next call: the same library, lane reopens
    assert bitwise_equal(pt.merge_attn(lo, lo, NH, 4, 4), _merged_ref(lo, lo, 4, 4))
    assert torch_ext.LANE[0] is ops._NATIVE
    compiled = torch.compile(pt.merge_attn, fullgraph=True, backend="eager")
    assert bitwise_equal(compiled(lo, lo, NH, 4, 4), _merged_ref(lo, lo, 4, 4))


def test_auto_mode_cpu_calls_load_a_cached_build_and_never_build(ext, small_artifacts,
                                                                   monkeypatch, tmp_path):
    """PSA_TVM_TORCH_EXT=auto: a CPU call loads the build already in the cache (no compiler
    runs); with an empty cache it takes the Python path without building."""
    library = native_rt.load(small_artifacts)

    def no_build(*args, **kwargs):
        raise AssertionError("a CPU call in auto mode started a build")

    monkeypatch.setenv("PSA_TVM_TORCH_EXT", "auto")
    monkeypatch.setattr(torch_ext, "build_and_load", no_build)
    try:
        torch_ext.reset()  # the module fixture's build stays in its cache
        module = torch_ext.module_for(library.path, may_build=False)
        assert module is not None  # from the cached file (Python keeps one module per file)
        lo = inputs((NH, 16, KD), torch.float32, "cpu", 1)
        assert bitwise_equal(module.merge_attn(lo, lo, NH, 4, 4), _merged_ref(lo, lo, 4, 4))
        torch_ext.reset()
        monkeypatch.setenv("PSA_TVM_CACHE", str(tmp_path))  # an empty cache
        assert torch_ext.module_for(library.path, may_build=False) is None
        assert torch_ext.module_for(library.path, may_build=False) is None  # looked once
    finally:
        torch_ext.reset()
        monkeypatch.undo()
        torch_ext.module_for(library.path, may_build=True)  # the fixture's state again


def test_cli_builds_it_ahead_of_time(ext, capsys):
    from psa_tvm.cli import main

    assert main(["torch-ext"]) == 0
    assert "the PyTorch extension is built" in capsys.readouterr().out


def test_disabled_by_the_environment(ext, small_artifacts, monkeypatch):
    monkeypatch.setenv("PSA_TVM_TORCH_EXT", "0")
    torch_ext.forget()
    assert torch_ext.module_for(native_rt.load(small_artifacts).path, may_build=True) is None
    monkeypatch.setenv("PSA_TVM_TORCH_EXT", "1")
    torch_ext.forget()


# ----------------------------------------------------------------------- GPU
@pytest.fixture(scope="module")
def gpu_ext():
    from psa_tvm import ops

    library = ops._load_native()
    if not library:
        pytest.skip("the artifact directory has no native library")
    module = torch_ext.module_for(library.path, may_build=True)
    if module is None:
        pytest.skip(f"the extension is unavailable: {torch_ext.unavailable_reason()}")
    return module


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", [(2, 20, 20), (3, 37, 29), (1, 40, 40)])
def test_gpu_exact_on_the_current_side_stream(gpu_ext, dtype, shape):
    batch, height, width = shape
    lo, hi, grad = _case(shape, dtype, "cuda")
    out = poisoned((batch, C, height, width), dtype, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000)  # a launch on the wrong stream would run before this
        gpu_ext.merge(lo, hi, NH, height, width, out.tensor)
        fresh = gpu_ext.merge_attn(lo, hi, NH, height, width)
        d_lo, d_hi = gpu_ext.merge_backward(grad, NH, KD, None, None)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    want = _merged_ref(lo.cpu(), hi.cpu(), height, width)
    assert bitwise_equal(out.tensor.cpu(), want) and out.canaries_intact()
    assert bitwise_equal(fresh.cpu(), want)
    ref_lo, ref_hi = _backward_ref(grad.cpu())
    assert bitwise_equal(d_lo.cpu(), ref_lo) and bitwise_equal(d_hi.cpu(), ref_hi)


@pytest.mark.gpu
def test_gpu_autograd_and_cuda_graph(gpu_ext):
    lo = inputs((2 * NH, 400, KD), torch.float16, "cuda", 1).requires_grad_(True)
    hi = inputs((2 * NH, 400, KD), torch.float16, "cuda", 2).requires_grad_(True)
    grad = inputs((2, C, 20, 20), torch.float16, "cuda", 3)
    merged = pt.merge_attn(lo, hi, NH, 20, 20)  # the public op takes the extension
    assert type(merged.grad_fn).__name__ == "CppFunction"
    d_lo, d_hi = torch.autograd.grad(merged, (lo, hi), grad)
    ref_lo, ref_hi = _backward_ref(grad.cpu())
    assert bitwise_equal(d_lo.cpu(), ref_lo) and bitwise_equal(d_hi.cpu(), ref_hi)

    static_lo, static_hi = lo.detach().clone(), hi.detach().clone()
    out = torch.empty(2, C, 20, 20, dtype=torch.float16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        gpu_ext.merge(static_lo, static_hi, NH, 20, 20, out)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        gpu_ext.merge(static_lo, static_hi, NH, 20, 20, out)
    out.zero_()
    static_lo.copy_(inputs(static_lo.shape, torch.float16, "cuda", 7))
    graph.replay()
    torch.cuda.synchronize()
    assert bitwise_equal(out.cpu(), _merged_ref(static_lo.cpu(), static_hi.cpu(), 20, 20))


def test_attention_inference_needs_the_layout_family(ext):
    """A library without the attention layout family: a missing-build error, on which
    psa_tvm.attention runs its Python launches."""
    qkv = inputs((1, 4 * NH * KD, 4, 4), torch.float16, "cpu")
    with pytest.raises(RuntimeError, match=r"^PsaArtifactNotFound"):
        ext.attention_inference(qkv, NH, KD, 4, 4, False)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cudnn", "flash"])
@pytest.mark.parametrize("shape", [(2, 20, 20), (1, 37, 29)])
def test_gpu_attention_inference_equals_the_python_path(gpu_ext, backend, shape):
    from psa_tvm import attention as A

    batch, height, width = shape
    qkv = inputs((batch, 4 * NH * KD, height, width), torch.float16, "cuda")
    with torch.inference_mode():
        direct = gpu_ext.attention_inference(qkv, NH, KD, height, width, backend == "flash")
        public = A.psa_attention(qkv, NH, KD, height, width, backend)
        with torch_ext.suspended():
            python = A.psa_attention(qkv, NH, KD, height, width, backend)
    trained = A.psa_attention(qkv.clone().requires_grad_(True), NH, KD, height, width, backend)
    assert bitwise_equal(direct, python) and bitwise_equal(public, python)
    if backend == "flash" and batch == 1:
        # inference pairs the two flash calls into one (a batch of 2): flash may split the
        # keys differently for a batch of 2, so the sums may round differently
        torch.testing.assert_close(python, trained.detach(), atol=2e-3, rtol=2e-3)
    else:
        assert bitwise_equal(python, trained.detach())


def test_fuzz_extension_entries(ext):
    """Random, mostly wrong arguments to the extension's functions (and its eager lanes, which
    may also answer None): ValueError, TypeError or a missing-build RuntimeError, or an exact
    result; never a crash, never a write when refused."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    dtypes = st.sampled_from([torch.float16, torch.float32, torch.float64, torch.int32])
    dims = st.integers(0, 9) | st.sampled_from([KD, NH, C, 2**31])

    @st.composite
    def tensor(draw):
        shape = [draw(dims) for _ in range(draw(st.integers(0, 5)))]
        extent = 1
        for size in shape:
            extent *= max(size, 1)
        hypothesis.assume(extent <= 1 << 40)
        dtype = draw(dtypes)
        if extent > 1 << 16:
            return torch.zeros(1, dtype=dtype).expand(*shape) if all(shape) else \
                torch.empty(shape, dtype=dtype)
        return torch.ones(shape, dtype=dtype)

    scalars = st.integers(-2, 9) | st.sampled_from([True, 2.5, "4", None, 2**62])

    @hypothesis.settings(max_examples=500, deadline=None, derandomize=True)
    @hypothesis.given(data=st.data())
    def run(data):
        draw = data.draw
        name = draw(st.sampled_from(["merge", "merge_backward", "merge_attn", "merge_eager",
                                     "merge_backward_eager", "merge_attn_eager"]))
        batch, height, width = draw(st.integers(0, 2)), draw(st.integers(0, 4)), 3
        n = height * width
        lo = inputs((batch * NH, n, KD), torch.float32, "cpu", 1)
        hi = inputs((batch * NH, n, KD), torch.float32, "cpu", 2)
        out = poisoned((batch, C, height, width), torch.float32, "cpu")
        valid = {"merge": [lo, hi, NH, height, width, out.tensor],
                 "merge_backward": [out.tensor, NH, KD, None, None],
                 "merge_attn": [lo, hi, NH, height, width]}[name.removesuffix("_eager")]
        args = list(valid)
        for _ in range(draw(st.integers(0, 3))):
            i = min(draw(st.integers(0, len(args) - 1)), len(args) - 1)
            args[i] = draw(tensor()) if draw(st.booleans()) else draw(scalars)
        snapshot = out.buffer.clone()
        try:
            getattr(ext, name)(*args)
        except (ValueError, TypeError) as err:
            assert torch.equal(out.buffer.view(torch.int32), snapshot.view(torch.int32)), err
            return
        except RuntimeError as err:
            assert str(err).startswith("PsaArtifactNotFound"), err
            return
        unchanged = all(a is b for a, b in zip(args, valid, strict=True))
        if unchanged and name.removesuffix("_eager") == "merge":
            assert bitwise_equal(out.tensor, _merged_ref(lo, hi, height, width))
        assert out.canaries_intact()

    run()
