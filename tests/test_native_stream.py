"""The native library's layout-family entries, ``stream_run`` and ``stream_plan`` (CPU only).

The kernel choice (entry, grid, block, arguments) is the RuntimeOp's for every op and pass,
aligned, misaligned, tails and int64; every bad argument is refused with the RuntimeOp's kind
of error before anything runs; a configuration the library lacks raises the missing-build
error, and ``psa_tvm.attention`` then launches through Python. The GPU runs are in
tests/test_attention_gpu.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil

import pytest
import torch

from psa_tvm import attention as A
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.layouts import STREAM_OPS
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp, StreamDims
from psa_tvm.runtime.tensors import tensor_info
from tests.helpers import mutate_arguments, untouched_memory

KD, NH = 32, 4
PASSES = ("forward", "backward")
OP_PASSES = [(name, p) for name, op in STREAM_OPS.items() for p in op.passes]

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None,
                                reason="no C++ compiler (g++) to build the native library")


@pytest.fixture(scope="module")
def lib(attention_artifacts) -> native_rt.NativeLibrary:
    library = native_rt.load(attention_artifacts)
    if library is None:
        pytest.skip("the native library was not built (see the build's warnings)")
    assert library.stream_run is not None and set(library.stream_ops) == set(STREAM_OPS)
    return library


def _carve(shapes: dict[str, tuple[int, ...]], offset: int = 0,
           dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """Disjoint views of one buffer, each starting ``offset`` elements past a 16-byte bound."""
    sizes = {name: _numel(shape) for name, shape in shapes.items()}
    buffer = torch.empty(sum(s + 64 for s in sizes.values()), dtype=dtype)
    tensors, at = {}, 0
    for name, shape in shapes.items():
        tensors[name] = buffer[at + offset: at + offset + sizes[name]].view(shape)
        at += (sizes[name] + 64) // 8 * 8
    return tensors


def _numel(shape) -> int:
    total = 1
    for s in shape:
        total *= s
    return total


def _plan_both(lib, art, name, pass_, b, n, tensors):
    op = STREAM_OPS[name]
    runtime = PsaStreamRuntimeOp(name, KD, NH, "float16", artifacts=art)
    ordered = [tensors[t] for t in op.tensor_names(pass_)]
    got = lib.stream_plan(lib.stream_ops[name], PASSES.index(pass_), b, n, NH, KD, "sm_90",
                          *ordered)
    infos = {t: tensor_info(x, t) for t, x in tensors.items()}
    return got, runtime.plan(pass_, infos, StreamDims(b, n))


@pytest.mark.parametrize("name,pass_", OP_PASSES)
@pytest.mark.parametrize("n,offset", [(400, 0), (400, 1), (401, 0), (64, 3), (1, 0),
                                      (37 * 29, 0)])
def test_choice_agrees_with_the_runtime_op(attention_artifacts, lib, name, pass_, n, offset):
    op = STREAM_OPS[name]
    tensors = _carve(op.kernel_shapes(pass_, 2, n, NH, KD), offset)
    got, plan = _plan_both(lib, attention_artifacts, name, pass_, 2, n, tensors)
    entry, grid, block, smem, args, source, schedule = got
    assert (entry, tuple(grid), tuple(block), smem) == (plan.kernel.entry, plan.grid, plan.block,
                                                        plan.shared_bytes)
    assert [tuple(a) for a in args] == [tuple(a) for a in plan.args]
    assert source == str(plan.build.source.relative_to(attention_artifacts))
    assert schedule == plan.build.schedule


def _fake_huge(shape, dtype=torch.float16) -> torch.Tensor:
    """A huge CPU tensor over untouched anonymous memory: planning reads no element."""
    count = _numel(shape)
    region = untouched_memory(count * dtype.itemsize)
    return torch.frombuffer(region, dtype=dtype, count=count).view(shape)


@pytest.mark.parametrize("name,pass_", [("qkv", "backward"), ("attn_flash", "forward")])
def test_int64_choice_agrees(attention_artifacts, lib, name, pass_):
    n = 6400
    b = 4096 // STREAM_OPS[name].num_streams  # the merged side: b*4*S*32*6400 >= 2**31 elements
    shapes = STREAM_OPS[name].kernel_shapes(pass_, b, n, NH, KD)
    tensors = {t: _fake_huge(s) for t, s in shapes.items()}
    got, plan = _plan_both(lib, attention_artifacts, name, pass_, b, n, tensors)
    assert plan.kernel.index_dtype == "int64"
    assert got[0] == plan.kernel.entry and [tuple(a) for a in got[4]] == [
        tuple(a) for a in plan.args]


def _qkv_call(b=2, n=400, dtype=torch.float16):
    """A valid forward call of ``qkv``: (p, merge)."""
    shapes = STREAM_OPS["qkv"].kernel_shapes("forward", b, n, NH, KD)
    return _carve(shapes, dtype=dtype)


def _bad_cases():
    op = 0  # qkv
    t = _qkv_call()
    p, merge = t["p"], t["merge"]
    fwd = (op, 0, 2, 400, NH, KD)
    return [
        ((99, 0, 2, 400, NH, KD, p, merge), ValueError, r"op: expected an index < 5"),
        ((-1, 0, 2, 400, NH, KD, p, merge), ValueError, r"op: expected an int >= 0, got -1"),
        ((op, 2, 2, 400, NH, KD, p, merge), ValueError, r"pass: expected 0 \(forward\) or 1"),
        ((1, 1, 2, 400, NH, KD, p, merge), ValueError,
         r"pass: op 'qkv_grad_flash' has no backward pass"),
        ((*fwd, p), ValueError, r"tensors: op 'qkv' forward expects \[p, merge\], got 1"),
        ((*fwd, p, "x"), TypeError, r"tensors\[1\]: expected a tensor"),
        ((*fwd, p, merge.float()), TypeError, r"merge: expected dtype float16, got float32"),
        ((*fwd, p[:, :399], merge), ValueError, r"p: expected shape \[2, 400, 4, 128\]"),
        ((*fwd, p, merge.reshape(-1)[:-8]), ValueError, r"merge: expected 409600 elements"),
        ((*fwd, p.transpose(0, 1).contiguous().transpose(0, 1), merge), ValueError,
         r"p: expected a contiguous tensor"),
        ((*fwd, p, p.reshape(-1)[:merge.numel()].view(merge.shape)), ValueError,
         r"merge: expected memory disjoint from p"),
        ((op, 0, True, 400, NH, KD, p, merge), ValueError,
         r"batch: expected an int >= 0, got True"),
        ((op, 0, 2, 400.0, NH, KD, p, merge), ValueError, r"n: expected an int >= 0, got 400.0"),
        ((op, 0, 2), TypeError, r"expected \(op, pass, batch, n, num_heads, key_dim"),
        ((op, 0, 2, 400, NH, 16, p, merge), ArtifactNotFoundError,
         r"no 'qkv' build for key_dim=16"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_bad_calls_are_refused_before_anything_runs(lib, case):
    args, kind, pattern = _bad_cases()[case]
    output = next((a for a in reversed(args) if isinstance(a, torch.Tensor)), None)
    before = output.clone() if output is not None else None
    with pytest.raises(kind, match=pattern):
        lib.stream_run(*args)
    with pytest.raises(kind, match=pattern):  # plan_* checks exactly as the call does
        lib.stream_plan(*args[:6], "sm_90", *args[6:]) if len(args) > 6 else \
            lib.stream_plan(*args)
    if output is not None:
        assert torch.equal(output.view(torch.int16), before.view(torch.int16))


def test_cpu_tensors_are_refused_with_a_reason(lib):
    t = _qkv_call()
    with pytest.raises(ValueError, match=r"p: expected a CUDA tensor.*psa_tvm.attention permutes"):
        lib.stream_run(0, 0, 2, 400, NH, KD, t["p"], t["merge"])


def test_attention_falls_back_where_the_library_lacks_a_build(lib, monkeypatch):
    """A configuration the library has no build for: the Python launcher runs it, and the
    library is not asked again."""
    from psa_tvm import ops

    launched = []

    class Recorder:
        def launch(self, pass_, tensors, batch, n, stream):
            launched.append((pass_, tuple(tensors), batch, n))

    monkeypatch.setattr(ops, "_NATIVE", lib)
    monkeypatch.setattr(A, "_runtime", lambda *key: Recorder())
    monkeypatch.setattr(A, "_stream", lambda t: 0)
    monkeypatch.setattr(A, "_NATIVE_LACKS", set())
    shapes = STREAM_OPS["qkv"].kernel_shapes("forward", 1, 16, NH, 16)
    tensors = tuple(_carve(shapes).values())
    for _ in range(2):
        A._launch("qkv", 0, tensors, 1, 16, NH, 16)
    assert launched == [("forward", ("p", "merge"), 1, 16)] * 2
    assert len(A._NATIVE_LACKS) == 1


def test_fuzz_stream_entries(lib):
    """Random, mostly wrong argument lists to stream_run / stream_plan: a Python exception
    (ValueError, TypeError, LookupError) or a plan, never a crash, never a write."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    dtypes = st.sampled_from([torch.float16, torch.float32, torch.bfloat16, torch.float64,
                              torch.int32, torch.uint8])
    dims = st.integers(0, 9) | st.sampled_from([KD, NH, 2 * KD, 4 * KD, 2**31, 2**62])

    @st.composite
    def tensor(draw):
        shape = [draw(dims) for _ in range(draw(st.integers(0, 6)))]
        dtype = draw(dtypes)
        extent = 1
        for size in shape:
            extent *= max(size, 1)
        hypothesis.assume(extent <= 1 << 50)
        if extent > 1 << 16:
            return torch.zeros(1, dtype=dtype).expand(*shape) if all(shape) else \
                torch.empty(shape, dtype=dtype)
        t = torch.ones(shape, dtype=dtype)
        return t.transpose(0, len(shape) - 1) if len(shape) >= 2 and draw(st.booleans()) else t

    scalars = st.integers(-3, 9) | st.sampled_from([True, 2.5, "sm_90", None, 2**62, -(2**62)])
    allowed = (ValueError, TypeError, LookupError)

    @hypothesis.settings(max_examples=400, deadline=None, derandomize=True)
    @hypothesis.given(data=st.data())
    def run(data):
        draw = data.draw
        name, pass_ = draw(st.sampled_from(OP_PASSES))
        op = STREAM_OPS[name]
        b, n = draw(st.integers(0, 3)), draw(st.integers(0, 20))
        tensors = _carve(op.kernel_shapes(pass_, b, n, NH, KD))
        output = tensors[op.tensor_names(pass_)[-1]]
        output.fill_(7)
        plan = draw(st.booleans())
        args = mutate_arguments(draw, [lib.stream_ops[name], PASSES.index(pass_), b, n, NH, KD,
                                       *(["sm_90"] if plan else []),
                                       *(tensors[t] for t in op.tensor_names(pass_))],
                                tensor(), scalars, st)
        with contextlib.suppress(*allowed):
            (lib.stream_plan if plan else lib.stream_run)(*args)
        assert bool((output == 7).all()), "a CPU call wrote"

    run()


def test_grid_limit_refused_as_the_runtime_op_does(attention_artifacts, lib):
    """B=8192 needs grid[1] = B*nh*S/2 = 65536 for qkv_grad_flash (two heads per CTA): the
    library refuses it with the RuntimeOp's message (planning reads no element: the tensors are
    untouched memory)."""
    name, b, n = "qkv_grad_flash", 8192, 64
    shapes = STREAM_OPS[name].kernel_shapes("forward", b, n, NH, KD)
    tensors = {t: _fake_huge(s) for t, s in shapes.items()}
    runtime = PsaStreamRuntimeOp(name, KD, NH, "float16", artifacts=attention_artifacts)
    with pytest.raises(ValueError) as want:
        runtime.plan("forward", {t: tensor_info(x, t) for t, x in tensors.items()},
                     StreamDims(b, n))
    assert str(want.value) == "shape: B=8192, N=64 needs grid[1]=65536, past the CUDA limit 65535"
    ordered = [tensors[t] for t in STREAM_OPS[name].tensor_names("forward")]
    with pytest.raises(ValueError) as got:
        lib.stream_plan(lib.stream_ops[name], 0, b, n, NH, KD, "sm_90", *ordered)
    assert str(got.value) == str(want.value)
